"""Reports over the inventory table and the vacuum audit: storage chargeback per Delta
table, and erasure evidence (when a file was physically deleted, and how long it can take)."""
