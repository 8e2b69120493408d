"""The node's local queue (local_queue/) as an executor: runs packed onto this node's GPUs (or CPU slots) by a
detached driver, requeued after their time limit like SLURM jobs; the queue's entry files are its view."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from zbpscale.jobs.executors.base import DRIVER_DOWN, Executor, JobView, View
from zbpscale.jobs.sweep_checks import field_error
from zbpscale.run.folder import RunFolder
from zbpscale.run.snapshot import record
from zbpscale.tables import plural
from zbpscale.text import shown_path

if TYPE_CHECKING:
    from zbpscale.jobs.sweep import PlannedRun, Sweep


class LocalExecutor(Executor):
    name = "local"
    label = "the local queue"

    def __init__(self, root: Path):
        from zbpscale.jobs.executors.local_queue.queue import LocalQueue

        super().__init__(root)
        self.queue = LocalQueue(self.root)
        self._driver_seen_dead = 0

    def view(self, submitted: list[dict], *, now: float) -> View:
        from zbpscale.jobs.executors.local_queue.queue import LIVE, SCHEDULER_STATE

        view = View()
        if not self.queue.entries_dir.is_dir():
            return view
        wanted = {s["job_id"] for s in submitted}
        alive = self.queue.driver_alive()
        for e in self.queue.entries():
            if e.job_id in wanted:
                if e.state in LIVE and not alive:
                    view.jobs[e.job_id] = JobView(DRIVER_DOWN, source="queue",
                                                  reason="the local queue's driver is not running")
                else:
                    view.jobs[e.job_id] = JobView(SCHEDULER_STATE.get(e.state, e.state.upper()), source="queue")
        return view

    def check(self, runs: list[PlannedRun], *, quick: bool = False) -> None:
        """The local queue runs one node: refuse runs it could never start, before anything is queued (a field_error:
        submit names the sweep file's line of the field)."""
        from zbpscale.jobs.executors.local_queue.slots import gpu_inventory

        inventory = gpu_inventory(ask_torch=not quick)
        for run in runs:
            res = run.size.resources
            if res.nodes > 1:
                raise field_error("Resources", "nodes", f"{run.name} asks for {res.nodes} nodes; the local queue runs "
                                  "on this node only", hint="submit it to SLURM, or set Resources(nodes=1) in the "
                                  "sweep", value=res.nodes, size=run.size.name)
            if res.gpus > len(inventory):
                raise field_error("Resources", "gpus_per_node", f"{run.name} needs {plural(res.gpus, 'GPU')}; this "
                                  f"node has {len(inventory)}", hint="lower Resources.gpus_per_node in the sweep (CPU "
                                  "runs: gpus_per_node=0), or check CUDA_VISIBLE_DEVICES",
                                  value=res.gpus_per_node, size=run.size.name)

    def submit(self, sweep: Sweep, todo: dict[PlannedRun, str], *, prep: bool, max_parallel: int = 0
               ) -> list[PlannedRun]:
        """Queue the runs (after the prep job when `prep`) and make sure the driver runs; the queue holds none
        back (it has no submit limit)."""
        from zbpscale.data import manifest_path
        from zbpscale.data.prepare_cli import to_argv
        from zbpscale.jobs.executors.local_queue.queue import Entry
        from zbpscale.jobs.sweep import data_path, prep_config

        queue, data = self.queue, data_path(sweep)
        with queue.submit_lock():
            if max_parallel:
                queue.set_max_parallel(max_parallel)
                print(f"local queue: at most {plural(max_parallel, 'run')} at once, for every sweep under "
                      f"{shown_path(queue.dir.parent)}, until a submit sets --max-parallel again")
            specs = []
            if prep:
                cfg = prep_config(sweep)
                command = [sys.executable, "-m", "zbpscale.cli", "prepare-data", *to_argv(cfg)]
                specs.append(Entry(job_id="", name=f"{sweep.name}/prep-data", kind="command", command=command,
                                   log_dir=str(sweep.jobs_dir / "prep-data-logs"), threads=cfg.workers,
                                   makes=str(manifest_path(data))))
            for run in todo:
                res, run_dir = run.size.resources, run.write_folder()
                specs.append(Entry(job_id="", name=f"{sweep.name}/{run.name}", run_dir=str(run_dir),
                                   log_dir=str(RunFolder(run_dir).logs), gpus=res.gpus, ranks=res.world_size,
                                   threads=res.cpus_per_task, time_s=res.time_min * 60.0,
                                   signal_delay_s=float(sweep.signal_delay_s), max_timeouts=sweep.max_timeouts,
                                   max_preemptions=sweep.max_preemptions, max_crashes=sweep.max_crashes,
                                   after="#0" if prep else ""))
            added = queue.add(specs)
            actions = {run.name: action for run, action in todo.items()}
            settings = {run.name: run.job_settings() for run in todo}
            for entry in added:
                if entry.kind == "command":
                    print(f"data not prepared at {data}: prep job {entry.job_id} (log in {entry.log_dir})")
                    continue
                name = entry.name.split("/", 1)[1]
                record(Path(entry.run_dir), "submitted", job_id=entry.job_id, executor=self.name, logs=entry.log_dir,
                       retry=actions[name] == "retry", name=entry.name, settings=settings[name])
                print(f"{name}: {actions[name]} -> local job {entry.job_id} (logs in {entry.log_dir})")
            started = queue.ensure_driver()
        if started and not added:
            print("the local queue's driver was not running: started it again; its jobs go on from their checkpoints")
        if added or started:
            print(f"local queue: {queue.dir} (driver log: {queue.dir / 'driver.log'})")
        return []

    def cancel(self, run_dir: Path, job: str, seen: JobView) -> str:
        return self.cancel_all([(run_dir, job, seen)]).get(job, "")

    def cancel_all(self, jobs: list[tuple[Path, str, JobView]]) -> dict[str, str]:
        """Every request written, then, where no driver is running, one started that applies them, settles what the
        dead one left running and starts nothing (started after the first request, a new driver started the jobs
        still waiting before it read the others; a full one started the sweep's runs that were not cancelled, and
        other sweeps' too, again)."""
        for _, job, _ in jobs:
            self.queue.request_cancel(job)
        for prep in self._idle_preps({job for _, job, _ in jobs}):
            self.queue.request_cancel(prep.job_id)
            print(f"{prep.name}: job {prep.job_id} (local, {prep.state}) asked to stop: no run left waits for it",
                  flush=True)
        self.queue.ensure_driver(starts=False)
        return {}

    def _idle_preps(self, cancelled: set[str]) -> list:
        """The live data-prep jobs of the cancelled runs' sweeps that no run will wait for once those stop: they
        are stopped with them (left queued, a prep ran after the whole sweep was cancelled: hours of a hub's
        download). A prep resumes where it stopped when the sweep is submitted again."""
        from zbpscale.jobs.executors.local_queue.queue import LIVE

        entries = self.queue.entries()
        sweeps = {e.name.split("/", 1)[0] for e in entries if e.job_id in cancelled}
        waited = {e.after for e in entries if e.kind == "train" and e.state in LIVE and e.job_id not in cancelled}
        return [e for e in entries if e.kind == "command" and e.state in LIVE and e.job_id not in waited
                and e.name.split("/", 1)[0] in sweeps]

    def keep_going(self, submitted: list[dict]) -> str:
        """Two looks in a row without a driver (not one still starting) while jobs wait: start one."""
        self._driver_seen_dead = 0 if self.queue.driver_alive() else self._driver_seen_dead + 1
        if self._driver_seen_dead >= 2 and self.queue.ensure_driver():
            return "the local queue's driver had stopped: started a new one"
        return ""
