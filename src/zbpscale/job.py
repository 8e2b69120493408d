"""Where SLURM jobs pickled by releases before 2026-12-02 (up to 0730d3f) find their callables: they name
`zbpscale.job.TrainJob` and `zbpscale.job.PrepJob`, and a job of such a release that starts or is requeued after an
upgrade unpickles them here. Their pickled state (the run folder and retry bounds; a PrepConfig) is what
zbpscale.entry's classes hold. Jobs of this release on pickle zbpscale.entry's names; nothing imports this module.
"""

from zbpscale.entry import PrepJob, TrainJob

__all__ = ["PrepJob", "TrainJob"]
