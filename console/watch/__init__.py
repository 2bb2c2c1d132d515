"""``gpuconsole watch``: alert events printed and paged (Apprise), the fleet as Prometheus
metrics under dcgm-exporter's names (:mod:`console.watch.metrics`, :mod:`console.watch.notify`,
:mod:`console.watch.runner`)."""
