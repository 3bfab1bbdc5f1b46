"""The PySpark pipeline: what-if simulation sweeps and rebalance-log analytics."""
