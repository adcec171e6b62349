"""Destinations: the Sink protocol, the blob chain shared by filesystem and S3, and the sinks."""
