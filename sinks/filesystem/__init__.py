"""The filesystem destination: chains as directories (`store`), lock-file leases (`leases`), documents as files
(`documents`), the archive's catalog (`catalog`), reading blobs back (`reading`); `destination` ties them."""
