"""What blob destinations share: a chain of immutable Parquet blobs per partition, named by their offset ranges
(`chain`), its sink (`sink`), the tasks' writer (`writer`), staging (`staging`) and reading back (`reading`), and the
base of the blob kinds (`destination`)."""
