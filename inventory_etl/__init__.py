"""Job 1: S3 Inventory deliveries into one partitioned Delta table (see DESIGN.md)."""
