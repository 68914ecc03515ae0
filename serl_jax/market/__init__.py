"""Dynamic multi-agent limit-order-book market simulator and its calibration."""
