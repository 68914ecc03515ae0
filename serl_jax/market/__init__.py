"""Dynamic multi-agent limit-order-book market simulator and the statistics its
calibration matches (the calibration CLI, which drives the envs, is
:mod:`serl_jax.calibrate`)."""
