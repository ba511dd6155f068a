"""Operating the jobs: S3 Inventory set-up, packaging for spark-submit, daily scheduling."""
