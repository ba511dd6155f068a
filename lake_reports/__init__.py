"""Reports over the inventory table and the vacuum audit: storage chargeback per Delta
table, and erasure evidence (when a file was physically deleted, and how long it can take).

``chargeback(spark, inventory_table)``, ``erasure(spark, audit_table, inventory_table)``, and
``erasure_request(spark, commit, request_id, audit_table, inventory_table)`` for one request's
evidence document.
"""

from lake_reports.charges import (
    Chargeback,
    ChargebackError,
    ChargebackOptions,
    ChargebackResult,
    ChargeCategory,
    chargeback,
)
from lake_reports.copies import CopyStatus, EtagKind
from lake_reports.erasure_decision import ErasureStatus
from lake_reports.erasure_document import ErasureRequest, EvidenceDocument, VerdictStatus, erasure_request
from lake_reports.erasure_evidence import (
    CommitQuestion,
    ErasureError,
    ErasureEvidence,
    ErasureOptions,
    ErasureReport,
    erasure,
)
from lakeio.errors import HousekeepingError

__all__ = [
    "ChargeCategory", "Chargeback", "ChargebackError", "ChargebackOptions", "ChargebackResult", "CommitQuestion",
    "CopyStatus", "ErasureError", "ErasureEvidence", "ErasureOptions", "ErasureReport", "ErasureRequest",
    "ErasureStatus", "EtagKind", "EvidenceDocument", "HousekeepingError", "VerdictStatus", "chargeback", "erasure",
    "erasure_request",
]
