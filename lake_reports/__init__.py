"""Reports over the inventory table and the vacuum audit: storage chargeback per Delta
table, and erasure evidence (when a file was physically deleted, and how long it can take).

``chargeback(spark, inventory_table)``, ``erasure(spark, audit_table, inventory_table)``,
``erasure_request(spark, audit_table, inventory_table, commit, request_id)`` for one request's
evidence document, and ``erasure_requests(spark, audit_table, inventory_table, requests)`` for
many in one pass.
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
from lake_reports.erasure_document import (
    ErasureRequest,
    EvidenceDocument,
    RequestBatch,
    VerdictStatus,
    erasure_request,
    erasure_requests,
)
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
    "ErasureStatus", "EtagKind", "EvidenceDocument", "HousekeepingError", "RequestBatch", "VerdictStatus",
    "chargeback", "erasure", "erasure_request", "erasure_requests",
]
