"""The API of sweep files: `from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm` (sweeps/*.py), and
`ModelConfig` for a size of your own shape (`Size(name="m760", model=ModelConfig(n_layer=24, ...))`).

A sweep file builds one `Sweep(...)` and does nothing else; the classes live with the job control that loads
them (zbpscale/jobs/sweep.py). This module is that API's stable name for users' sweep files.
"""

from zbpscale.jobs.sweep import Arm, Data, Resources, Size, Sweep, Tune, arm
from zbpscale.run.config import ModelConfig

__all__ = ["Arm", "Data", "ModelConfig", "Resources", "Size", "Sweep", "Tune", "arm"]
