import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lakeio.store import uris


def test_local_paths_become_file_uris(tmp_path):
    assert uris.to_uri(str(tmp_path)) == f"file://{tmp_path}"
    assert uris.to_uri("file:/tmp/x") == "file:///tmp/x"
    assert uris.to_uri("file:///tmp/x") == "file:///tmp/x"
    assert uris.to_uri("s3a://b/k") == "s3a://b/k"


def test_canonical_folds_s3_schemes_and_trailing_slash():
    assert uris.canonical("s3a://b/t/") == uris.canonical("s3://b/t") == uris.canonical("S3N://b/t")
    assert uris.canonical("file:/tmp/a b") == "file:///tmp/a b"
    assert uris.canonical("gs://b/t") != uris.canonical("s3://b/t")


def test_strictly_under_never_matches_a_neighbour_or_the_root_itself():
    assert uris.is_strictly_under("s3a://b/t/part-0.parquet", "s3://b/t")
    assert not uris.is_strictly_under("s3://b/t_backup/part-0.parquet", "s3://b/t")
    assert not uris.is_strictly_under("s3://b/t", "s3://b/t")
    assert not uris.is_strictly_under("s3://other/t/x", "s3://b/t")


def test_log_paths_are_decoded():
    assert uris.decode_log_path("a%20b/c%2520d") == "a b/c%20d"


def test_empty_path_is_refused():
    with pytest.raises(ValueError):
        uris.to_uri("  ")


def test_whitespace_is_part_of_a_key():
    """S3 keys may end (and a folder may begin) with whitespace: one object, one spelling."""
    assert uris.canonical("s3a://b/t/x ") == "s3://b/t/x "
    assert uris.canonical("s3://b/ t/\u00a0") == "s3://b/ t/\u00a0"
    assert uris.to_uri("file:/tmp/x\t") == "file:///tmp/x\t"


def test_spark_canonical_agrees_with_python(spark):
    spellings = ["s3://b/k", "s3a://b/t/", "S3N://b/t//", "gs://b/a:b/c", "file:/tmp/a b", "file:///tmp/x/",
                 "file:////tmp/y", "file://tmp/z", "file:///", "hdfs://nn:8020/w/t/p=1/"]
    frame = spark.createDataFrame([(s,) for s in spellings], "uri string")
    assert [r[0] for r in frame.select(uris.canonical_col(frame["uri"])).collect()] == [
        uris.canonical(s) for s in spellings]


# URIs with a scheme, spelled every way: scheme case and aliases, zero to four slashes, colons, percent
# signs and whitespace anywhere (a key may end in a space or a no-break space), trailing slashes.
_SPELLINGS = st.builds(
    lambda scheme, slashes, body, trailing: f"{scheme}:{'/' * slashes}{body}{'/' * trailing}",
    st.sampled_from(["s3", "S3", "s3a", "S3A", "s3n", "file", "FILE", "File", "gs", "hdfs", "abfss"]),
    st.integers(0, 4), st.text(alphabet="ab/:.% \t\u00a0", max_size=12), st.integers(0, 3))


# Each example is a Spark job of 200 spellings; a failure names its spellings itself, unshrunk.
@settings(max_examples=5, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_SPELLINGS, min_size=200, max_size=200))
def test_spark_canonical_agrees_with_python_on_any_spelling(spark, spellings):
    """The fast path for spellings already canonical and the rebuilt one for the rest must both
    equal :func:`uris.canonical`."""
    frame = spark.createDataFrame([(s,) for s in spellings], "uri string")
    found = [r[0] for r in frame.select(uris.canonical_col(frame["uri"])).collect()]
    wrong = [(s, got, uris.canonical(s)) for s, got in zip(spellings, found) if got != uris.canonical(s)]
    assert not wrong, f"(spelling, Spark's, Python's): {wrong[:5]}"


_ROOTS = [uris.table_root(r) for r in ("s3://lake/warehouse/a", "s3://lake/warehouse/b/c", "s3://lake/other/d",
                                       "s3://other/warehouse/e", "file:///data/warehouse/f", "file:///data/g")]


# A store or local folder spelled every way a user may: s3's aliases in any case, file: with one or three
# slashes or a plain path; the folder closed by a slash or not.
@settings(deadline=None)
@given(st.sampled_from([("s3://lake/warehouse", "s3"), ("file:///data/warehouse", "file"), ("s3://lake", "s3")]),
       st.sampled_from(["s3", "S3", "s3a", "S3A", "s3n"]), st.sampled_from(["file:", "file://", "FILE:", ""]),
       st.integers(0, 1), st.booleans())
def test_a_glob_chooses_the_same_tables_whichever_way_it_spells_their_store(folder, alias, local, trailing, exclude):
    """``--include``/``--exclude`` compare canonical forms, as ``--table`` does (the README's Kubernetes example
    spells ``s3a://``); a glob naming neither a store nor a path is taken as written."""
    from vacuum_jobs.targets import Discover

    canonical, kind = folder
    rest = canonical.split(":", 1)[1]
    spelled = f"{alias}:{rest}" if kind == "s3" else local + "/" + rest.lstrip("/")
    glob = spelled + "/" * trailing + "*"
    under = {r for r in _ROOTS if r.startswith(canonical + "/")}
    chosen = {t.uri for t in (Discover(exclude=(glob,)) if exclude else Discover(include=(glob,))).targets(_ROOTS)}
    assert chosen == (set(_ROOTS) - under if exclude else under), glob
    assert {t.uri for t in Discover(include=("*/warehouse/*",)).targets(_ROOTS)} == {
        r for r in _ROOTS if "/warehouse/" in r}
