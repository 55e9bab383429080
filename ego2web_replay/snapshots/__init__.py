"""The on-disk snapshot: WARC 1.1 archives (zstd per record), the CDXJ index, the manifest."""
