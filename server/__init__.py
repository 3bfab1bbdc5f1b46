"""The remote group leader: the gRPC service, the group state machine and its runtime."""
