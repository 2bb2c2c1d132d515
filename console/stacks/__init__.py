"""Per-rank Python stacks of a running job (``gpuconsole stacks``, the app's stacks view, the
``job_hung`` alert's summary): :mod:`~console.stacks.model` (typed records of what each node's
py-spy read), :mod:`~console.stacks.analysis` (groups, odd ones out, likely causes),
:mod:`~console.stacks.render` (the text). Taking them is the backends' (one way per runtime,
:mod:`remote.stacks`)."""
