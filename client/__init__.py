"""The worker side: group member, lag reporting, state-cleanup lock, KIP-535 routing."""
