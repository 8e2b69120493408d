"""The API of sweep files: `from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm` (sweeps/*.py).

A sweep file builds one `Sweep(...)` and does nothing else; the classes live with the job control that loads
them (zbpscale/jobs/sweep.py). This module is that API's stable name for users' sweep files.
"""

from zbpscale.jobs.sweep import Arm, Data, Resources, Size, Sweep, Tune, arm

__all__ = ["Arm", "Data", "Resources", "Size", "Sweep", "Tune", "arm"]
