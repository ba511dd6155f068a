"""The stores the jobs touch: URIs as we spell them, Hadoop file systems, S3 and what a store is proven to honour."""
