"""The Kafka destination: the driver's sink (`sink`), the tasks' transactional produce (`produce`), group-offset
leases (`leases`); `destination` ties them."""
