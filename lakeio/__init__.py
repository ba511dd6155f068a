"""What both jobs share: the Spark session, storage URIs and the Delta write path."""

__version__ = "0.1.0"
