"""The dynamic markets: the multi-agent limit-order-book simulator and the statistics its
calibration matches (the calibration CLI, which drives the envs, is
:mod:`serl_jax.calibrate`), and the propagator model of the agents' own impact on
replayed bars (:mod:`serl_jax.market.propagator`)."""
