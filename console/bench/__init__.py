"""``gpuconsole bench``: the console's side of the GPU bench (``remote/bench/gpubench.py``).

- :mod:`console.bench.datasheet`: NVIDIA's figures for the usual models, with sources;
- :mod:`console.bench.model`: the script's documents typed once (:class:`GpuBench`,
  :class:`HostBench`) and a run (:class:`BenchRun`);
- :mod:`console.bench.analysis`: each GPU against its model's fleet median and datasheet,
  flags with the likely reason from the telemetry taken during the bench;
- :mod:`console.bench.store`: the last results per host and GPU in the state dir;
- :mod:`console.bench.render`: ``bench``'s table, the plan's note, the fleet view's line.
"""
