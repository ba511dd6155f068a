"""A settled table carried forward: a run with an audit table neither reads its log nor plans it, because the
last plan of it proved it has nothing to delete, and nothing that plan stood on has changed since.

A plan proves a table settled when it finds no candidate, keeps no file for a pin or for another table, names no
file outside the table's root, and the run writes no history into it. Its audit row then holds ``plan_state``
(:class:`PlanState`, JSON): what that plan stood on, each part something the next run can check without the log:

- the log: the name, size and modification time of every file directly in ``_delta_log/``, as one digest (a
  commit, a checkpoint written or rewritten, a log cleanup, a restore: each changes it), listed once more after the
  plan and only kept when it still shows the version planned;
- the objects the table owns outside its log in the inventory (deltalog.ownership, so a nested table found or
  gone counts): how many, their bytes, and an order-free digest of each row's path, size, time and version flags,
  summed per folder in the scan that finds the tables (:class:`InventoryFolders`);
- when the clock alone next brings it a candidate (``quiet_until``), and the retention and check the run asked.

The next run (not ``full``, which neither carries nor records) carries a table forward when the audit holds a state
of it (the newest) and, now, the run asks
the same retention, no pin names the table, the inventory's objects digest the same, the clock is before
``quiet_until``, the coverage meets the run's minimum, and its ``_delta_log/`` lists the same files: every
proof, or the table is planned in full. A carried table deletes nothing, which never harms it; and since it names
nothing outside its root, the other tables' plans need nothing from its log. It ends as a plan with nothing to
delete would (``vacuumed``, or ``dry_run``), ``reason_code`` ``unchanged``, with the counts of the plan it
carries, and its row records the state again: nothing is left to delete in it, as a plan would have found. A table the run
would delete in and write the history of is planned, as Delta's VACUUM writes START and END with nothing to
delete; and since those commits change its log, a run that writes them records no state of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit.contract import TableStatus, read_audit, rows_date
from lakeio.deltalog.ownership import log_root, with_owner
from lakeio.inventory import InventorySnapshot, is_current
from lakeio.pins import Pin
from lakeio.spark.shapes import local_frame
from lakeio.spark.steps import Step, Steps
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.tables.read import TableNotFound
from lakeio.text import first_line
from lakeio.times import cutoff_ms, iso_utc
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import RunTables, TableCounts, TableReport
from vacuum_jobs.targets import TableTarget

log = logging.getLogger(__name__)

STATE_FORMAT = 1  # PlanState's JSON; a state of another format is not trusted (the table is planned in full)
MEMORY_DAYS = 31  # how far back a run looks for a table's newest state: the audit's partitions it reads
# The columns of an inventory row its objects' digest covers, where the inventory has them.
_DIGESTED = ("path", "length", "isDir", "modificationTime", "is_latest", "is_delete_marker", "version_id",
             "storage_class")


@dataclass(frozen=True)
class PlanState:
    """What a plan that proved its table settled stood on (see the module)."""

    version: int  # the log version planned
    log: str  # SHA-256 of the ``_delta_log/`` listing: each file's name, size and modification time
    objects: str  # the owned objects outside the log: count, bytes and their digests (:meth:`InventoryFolders.digests`)
    quiet_until: str | None  # ISO-8601 UTC; None: the clock alone never brings a candidate
    retention_asked: float | None  # the run's (or the tables file's) retention for the table; None: its own
    retention_checked: bool  # the run's enforce_retention_duration
    retention_hours: float | None
    coverage: float | None
    counts: dict[str, int]  # the plan's non-zero TableCounts
    format: int = STATE_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PlanState | None:
        """The state ``text`` holds; None for one this release does not read (another format, or not ours)."""
        try:
            found = json.loads(text)
            state = cls(**found)
        except (TypeError, ValueError):
            return None
        return state if state.format == STATE_FORMAT else None


class InventoryFolders:
    """The inventory's rows summed per folder, in the one scan a carrying run makes of them for two answers: the
    Delta tables the inventory shows (:meth:`roots`, as ownership.delta_roots finds them) and each table's objects
    digest (:meth:`digests`). All rows of a folder have one owner, the longest root above it, and the digest's
    parts (counts, sums, xors) add up by folder, so only the folders meet the roots. Cached until :meth:`release`."""

    def __init__(self, rows: DataFrame):
        columns = [F.col(name) for name in _DIGESTED if name in rows.columns]
        canonical = rows.where(F.col("path").isNotNull()).withColumn("path", uris.canonical_col(F.col("path")))
        folder = F.expr("substring(path, 1, length(path) - length(substring_index(path, '/', -1)) - 1)")
        self.frame = canonical.groupBy(folder.alias("folder")).agg(
            F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"),
            F.bit_xor(F.xxhash64(*columns)).alias("x64"), F.bit_xor(F.hash(*columns)).alias("x32"),
            F.max(is_current()).alias("current")).persist()

    def roots(self) -> list[TableRoot]:
        """Canonical roots of every Delta table the inventory shows: a folder in a ``_delta_log/`` holding a current
        object (a path's first ``/_delta_log/`` lies within its folder and the slash after it)."""
        root = log_root(F.concat("folder", F.lit("/")))
        found = self.frame.where(F.col("current")).select(root.alias("root")).where(F.col("root") != "").distinct()
        return sorted(TableRoot(r["root"]) for r in found.collect())

    def digests(self, roots: Sequence[TableRoot], among: Iterable[TableRoot]) -> dict[TableRoot, str]:
        """For each of ``among``, the rows it owns (among every Delta root ``roots``) outside its ``_delta_log/``:
        ``count:bytes:xor64:xor32`` of their digests. A folder's owner is its rows' (each row ``folder/name``
        has the folder's slashes and one more), so the folders take owners as ``folder/``. A table owning none
        has ``0:0:0:0``."""
        wanted = set(among)
        owners = local_frame(self.frame.sparkSession, [(root,) for root in sorted(wanted)], "table_root string")
        owned = with_owner(self.frame.withColumn("path", F.concat("folder", F.lit("/"))), roots).join(
            F.broadcast(owners), "table_root")
        owned = owned.where(~F.col("path").startswith(F.concat("table_root", F.lit("/_delta_log/"))))
        found = {TableRoot(r["table_root"]): f"{r['n']}:{r['bytes']}:{r['x64']}:{r['x32']}" for r in owned.groupBy(
            "table_root").agg(F.sum("n").alias("n"), F.sum("bytes").alias("bytes"), F.bit_xor("x64").alias("x64"),
                              F.bit_xor("x32").alias("x32")).collect()}
        return {root: found.get(root, "0:0:0:0") for root in wanted}

    def release(self) -> None:
        self.frame.unpersist()


def log_digests(spark: SparkSession, storage: Storage, roots: Sequence[TableRoot]) -> dict[TableRoot, tuple[str, int | None]]:
    """Each table's ``_delta_log/`` as listed now: the SHA-256 of its files' names, sizes and modification times,
    and the newest version a commit or checkpoint there names. One listing by Spark for all; where that fails (a
    folder gone), each alone; a table whose log cannot be listed is left out."""
    if not roots:
        return {}
    folders = {uris.canonical(uris.join(root, "_delta_log")): root for root in roots}
    try:
        listed = (spark.read.format("binaryFile").load([uris.literal(f) for f in folders])
                  .select("path", "length", F.unix_millis("modificationTime").alias("mtime")).collect())
        entries: dict[TableRoot, list[tuple[str, int, int]]] = {root: [] for root in roots}
        for row in listed:
            root = folders.get(uris.canonical(uris.parent(uris.decode_log_path(row["path"]))))
            if root is not None:
                entries[root].append((uris.name(uris.decode_log_path(row["path"])), row["length"], row["mtime"]))
    except Exception:  # noqa: BLE001 - one folder that cannot be listed: each alone, to know which
        def one(root: TableRoot) -> list[tuple[str, int, int]] | None:
            try:
                return [(uris.name(s.uri), s.size, s.modification_time)
                        for s in storage.list(uris.join(root, "_delta_log"))
                        if not s.is_dir and not uris.name(s.uri).startswith(("_", "."))]
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: its log cannot be listed, so it is planned in full: %s", root, first_line(exc))
                return None
        with ThreadPoolExecutor(max_workers=16) as pool:
            alone = dict(zip(roots, pool.map(one, roots)))
        entries = {root: files for root, files in alone.items() if files}
    return {root: _log_digest(files) for root, files in entries.items() if files}


def _log_digest(files: list[tuple[str, int, int]]) -> tuple[str, int | None]:
    text = "\n".join(f"{name}\t{size}\t{mtime}" for name, size, mtime in sorted(files))
    versions = [int(name[:20]) for name, _, _ in files if name[:20].isdigit() and name[20:21] == "."]
    return hashlib.sha256(text.encode()).hexdigest(), max(versions, default=None)


def newest_states(spark: SparkSession, audit_table: str, roots: Sequence[TableRoot], now_ms: int
                  ) -> dict[TableRoot, tuple[PlanState, str | None]]:
    """Of ``roots``, those with a state this release reads in the audit (the newest of the last ``MEMORY_DAYS``), each
    with the ``log_sha256`` of its row: the hash of the commit file it planned from. Any
    state whose every proof holds now is one, whatever came after it: a table restored, refused or planned by a
    ``--full`` run since is carried only if its log and objects are again as that state found them."""
    try:
        rows = read_audit(spark, audit_table).where(
            (F.col("run_date") >= rows_date(now_ms) - timedelta(days=MEMORY_DAYS)) & F.col("path").isNull()
            & F.col("table_root").isin(*roots) & F.col("plan_state").isNotNull())
    except TableNotFound:
        return {}
    newest = rows.groupBy("table_root").agg(F.max_by(F.struct("plan_state", "log_sha256"),
                                                     F.struct("timestamp", "run_id")).alias("state"))
    found = {}
    for row in newest.collect():
        state = PlanState.from_json(row["state"]["plan_state"])
        if state is not None:
            found[TableRoot(row["table_root"])] = state, row["state"]["log_sha256"]
    return found


class CarryForward:
    """One run's carrying: which tables it carries (:meth:`carry`), and the states its plans prove (:meth:`settle`)."""

    def __init__(self, spark: SparkSession, storage: Storage, options: VacuumOptions, progress: Steps,
                 audit_table: str):
        self.spark, self.storage, self.options, self.progress = spark, storage, options, progress
        self.audit_table = audit_table
        self.objects: dict[TableRoot, str] = {}
        self.states: dict[TableRoot, str] = {}  # each table's state to record, as JSON
        self.carried: set[TableRoot] = set()  # the tables carried forward: not read, not planned
        self.hashes: dict[TableRoot, str] = {}  # each carried table's log_sha256, as its state's row holds it
        self.folders: InventoryFolders | None = None

    def find_roots(self, inventory: InventorySnapshot) -> list[TableRoot]:
        """Every Delta table root the inventory shows, from the scan that sums its folders for :meth:`carry`."""
        self.folders = InventoryFolders(inventory.rows)
        return self.folders.roots()

    def release(self) -> None:
        """What :meth:`find_roots` cached."""
        if self.folders is not None:
            self.folders.release()
            self.folders = None

    def carry(self, targets: list[TableTarget], roots: Sequence[TableRoot],
              run_tables: RunTables, pins: Sequence[Pin], now_ms: int,
              writes_history: Callable[[TableTarget], bool]) -> list[TableTarget]:
        """``targets`` less the tables carried forward, each of those ended (``unchanged``) with the counts of the
        plan it carries. Digests every target's objects, for :meth:`settle` too. A table the run
        deletes in and ``writes_history`` of is never carried: a vacuum of it leaves its VACUUM START and END, as
        Delta's does, even with nothing to delete."""
        if not targets:
            return targets
        self.progress.begin(Step.CARRYING, f"digesting the objects of {len(targets)} table(s), to carry those "
                            "unchanged forward")
        assert self.folders is not None, "find_roots first"
        self.objects = self.folders.digests(roots, [t.root for t in targets])
        self.release()  # the plan reads the rows themselves
        pinned = {pin.root for pin in pins}
        recorded = newest_states(self.spark, self.audit_table, [t.root for t in targets], now_ms)
        now = iso_utc(now_ms)
        held = {t.root: state for t in targets if (state := recorded.get(t.root, (None, None))[0]) is not None
                and (self.options.dry_run or bool(t.dry_run) or not writes_history(t))
                and state.objects == self.objects[t.root] and t.root not in pinned
                and (state.quiet_until is None or now < state.quiet_until)
                and state.retention_asked == self._asked(t) and state.retention_checked == self.options.enforce_retention_duration
                and (state.coverage is None or state.coverage >= self.options.min_coverage)}
        listed = log_digests(self.spark, self.storage, list(held))
        targets_by_root = {t.root: t for t in targets}
        carried = {root: state for root, state in held.items() if listed.get(root) == (state.log, state.version)}
        for root, state in carried.items():
            report = run_tables[root]
            report.version, report.retention_hours, report.coverage = state.version, state.retention_hours, state.coverage
            report.quiet_until = state.quiet_until
            if state.retention_hours is not None:
                report.cutoff = iso_utc(cutoff_ms(now_ms, state.retention_hours))
            report.counts = TableCounts(**state.counts)
            until = f"until {state.quiet_until}" if state.quiet_until else "by the clock alone, ever"
            run_tables.carried(root, self.options.dry_run or bool(targets_by_root[root].dry_run),
                               f"unchanged since its last plan (version {state.version}): no candidate {until}; not read "
                            f"again, its counts are that plan's (--full plans it)")
            self.states[root] = state.to_json()
            if (commit_hash := recorded[root][1]) is not None:
                self.hashes[root] = commit_hash
        self.carried = set(carried)
        if carried:
            self.progress(f"{len(carried)} of {len(targets)} table(s) unchanged since their last plan: carried forward")
        return [t for t in targets if t.root not in self.carried]

    def settle(self, run_tables: RunTables, targets: Sequence[TableTarget], outside: dict[TableRoot, int]) -> None:
        """The state of each table of ``targets`` its plan proved settled (see the module), for the audit: its log
        listed once more after the run, kept only where it still shows the version planned (a history the run
        wrote there, or another writer's commit, makes it newer). ``outside``: the files each planned table's log
        names outside its root."""
        proved = {t.root: t for t in targets if _settled(run_tables[t.root], outside.get(t.root))}
        listed = log_digests(self.spark, self.storage, list(proved))
        for root, target in proved.items():
            report = run_tables[root]
            digest, version = listed.get(root, (None, None))
            if digest is None or version != report.version or root not in self.objects:
                continue
            assert report.version is not None
            self.states[root] = PlanState(
                report.version, digest, self.objects[root], report.quiet_until, self._asked(target),
                self.options.enforce_retention_duration, report.retention_hours, report.coverage,
                {k: v for k, v in asdict(report.counts).items() if v}).to_json()

    def _asked(self, target: TableTarget) -> float | None:
        """The retention the run asks for ``target``: its own in the tables file, else the run's; None: the table's."""
        return next((h for h in (target.retention_hours, self.options.retention_hours) if h is not None), None)


def _settled(report: TableReport, outside: int | None) -> bool:
    """Planned, with nothing to delete, nothing kept for a pin or another table, nothing named outside its root."""
    counts = report.counts
    return (report.status in (TableStatus.VACUUMED, TableStatus.DRY_RUN) and outside == 0 and report.version is not None
            and not (counts.candidate_files or counts.pinned_files or counts.referenced_files))
