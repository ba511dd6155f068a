"""Reading Delta transaction logs on Spark, as every job needs them: log segments, replay,
the keep rules, table ownership of storage paths, policies and protocol gates."""
