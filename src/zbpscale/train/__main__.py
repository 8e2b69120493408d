"""`python -m zbpscale.train ...` (or `torchrun -m zbpscale.train ...`): one run by hand (train/cli.py).

The process ends with the trainer's status without the interpreter's teardown, as the executors' ranks do: the
trainer has closed and fsynced what it wrote, and tearing torch's gloo threads down at finalization can abort a
rank of a distributed run that did all its work (SIGABRT, `terminate called without an active exception`)."""

from zbpscale.train.cli import main
from zbpscale.train.exits import leave

leave(main())
