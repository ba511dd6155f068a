"""What the jobs share: the inventory contract, errors, times and text; the audit, Spark, stores and our own tables in their rooms."""

import os

__version__ = "0.1.0"

# delta-rs logs from Rust at WARN on every S3 table it opens where one link of the AWS credential chain is
# absent (IMDS on a laptop): noise before any error of ours. Read once, when deltalake loads; RUST_LOG wins.
os.environ.setdefault("RUST_LOG", "error")
