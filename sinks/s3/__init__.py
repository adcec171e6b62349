"""The S3 destination: chains as key prefixes committed by conditional uploads (`store`, `staging`), object leases
(`leases`), documents as objects (`documents`), the archive's catalog (`catalog`), reading blobs back (`reading`),
S3's errors classified (`errors`); `destination` ties them."""
