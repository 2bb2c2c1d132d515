"""The fleet state the service keeps: a :class:`~console.fleet.state.FleetState` that
publishes its changes on the service's :class:`~console.events.EventBus`."""

from __future__ import annotations

from collections.abc import Mapping

from console.events import ContainersMapped, EventBus, HostStateChanged, SampleReceived
from console.fleet.state import ContainerJob, FleetState
from remote.telemetry.schema import Sample


class ObservedFleetState(FleetState):
    """A :class:`FleetState` that publishes what changes on an :class:`EventBus`.

    Samples become :class:`SampleReceived`, status transitions :class:`HostStateChanged`, and
    container maps :class:`ContainersMapped`. Subscribers are isolated by the bus, so a failing
    view can never turn a host ``down``.
    """

    def __init__(self, bus: EventBus, hosts: list[str], interval: float = 1.0) -> None:
        super().__init__(hosts, interval)
        self.bus = bus

    def _publish_status(self, host: str, before: str) -> None:
        v = self.hosts[host]
        if v.status != before:
            self.bus.publish(HostStateChanged(host, v.status, before, v.error))

    def on_sample(self, host: str, sample: Sample, rx: float | None = None) -> None:
        """Take a sample (see :meth:`FleetState.on_sample`) and publish it."""
        before = self.host(host).status
        super().on_sample(host, sample, rx)
        self._publish_status(host, before)
        self.bus.publish(SampleReceived(host, sample))

    def on_down(self, host: str, error: str) -> None:
        """Mark a host down (see :meth:`FleetState.on_down`) and publish the change."""
        v = self.host(host)
        before, before_err = v.status, v.error
        super().on_down(host, error)
        if before != "down" or before_err != error:
            self.bus.publish(HostStateChanged(host, "down", before, error))

    def tick(self, now: float | None = None) -> list[str]:
        """Mark stale hosts (see :meth:`FleetState.tick`) and publish each change."""
        turned = super().tick(now)
        for h in turned:
            self.bus.publish(HostStateChanged(h, "stale", "ok", "no sample for 3 intervals"))
        return turned

    def set_containers(self, mapping: Mapping[str, ContainerJob]) -> None:
        """Replace the container -> job map and publish it."""
        super().set_containers(mapping)
        self.bus.publish(ContainersMapped(dict(self.containers)))
