"""Reports over the inventory table and the vacuum audit: storage chargeback per Delta
table, and erasure evidence (when a file was physically deleted, and how long it can take).

``chargeback(spark, inventory_table)`` and ``erasure(spark, audit_table, inventory_table)``.
"""

from lake_reports.charges import Chargeback, ChargebackError, ChargebackOptions, ChargebackResult, chargeback
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
    "ErasureEvidence", "ErasureOptions", "ErasureReport", "chargeback", "erasure",
]
