"""Job 1: S3 Inventory deliveries into one partitioned Delta table (see docs/DESIGN.md).

``ingest(spark, inventory_table, manifests)`` ingests; ``inventory_snapshot`` reads one date back.
"""

from inventory_etl.ingestion import DeliveryOutcome, DeliveryStatus, IngestInventory, IngestResult, ingest
from lakeio.errors import HousekeepingError
from lakeio.inventory import InventorySnapshot, InventoryUnavailable, inventory_snapshot

__all__ = ["DeliveryOutcome", "DeliveryStatus", "HousekeepingError", "IngestInventory", "IngestResult",
           "InventorySnapshot", "InventoryUnavailable", "ingest", "inventory_snapshot"]
