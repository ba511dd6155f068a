"""Reports over the inventory table and the vacuum audit: storage chargeback per Delta
table, and erasure evidence (when a file was physically deleted, and how long it can take).

``chargeback(spark, inventory_table)``, ``erasure(spark, audit_table, inventory_table)``, and
``erasure_request(spark, commit, request_id, audit_table, inventory_table)`` for one request's
evidence document.
"""

from lake_reports.charges import Chargeback, ChargebackError, ChargebackOptions, ChargebackResult, chargeback
from lake_reports.erasure_document import ErasureRequest, EvidenceDocument, erasure_request
from lake_reports.erasure_evidence import (
    CommitQuestion,
    ErasureError,
    ErasureEvidence,
    ErasureOptions,
    ErasureReport,
    erasure,
)

__all__ = [
    "Chargeback", "ChargebackError", "ChargebackOptions", "ChargebackResult", "CommitQuestion", "ErasureError",
    "ErasureEvidence", "ErasureOptions", "ErasureReport", "ErasureRequest", "EvidenceDocument", "chargeback", "erasure",
    "erasure_request",
]
