"""Alert rules over telemetry, job state and log activity (``gpuconsole watch``, the TUI's
alerts view). :mod:`console.alerts.model` holds the types every face shares."""
