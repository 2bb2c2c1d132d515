"""The Slurm backend: a profile with ``scheduler: slurm`` runs a job spec as one sbatch job
(one torchrun per node under ``srun``, c10d rendezvous on the first node).

Modules: ``fields`` (validated field types), ``script`` (the sbatch script, pure),
``state`` (squeue/scontrol/sacct and srun output read as job and node states, pure),
``backend`` (submit, refresh, adopt, stop, remove and logs over the login host's SSH).
Nothing here is imported at start-up except ``fields``.
"""
