"""The runs ``python -m serl_jax.train`` drives, one module each: plain PPO
(:mod:`serl_jax.training.ppo`), N agents with IPPO/MAPPO (:mod:`serl_jax.training.agents`)
and the SE-RL loop (:mod:`serl_jax.training.serl`); with the validated programs a config
names (:mod:`serl_jax.training.programs`) and the run folder of the first two
(:mod:`serl_jax.training.run_folder`). Above the loop and the experiments, below the
CLIs."""
