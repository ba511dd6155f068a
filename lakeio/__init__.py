"""What both jobs share: the Spark session, storage URIs and the Delta write path."""
