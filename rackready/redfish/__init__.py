"""Redfish (DMTF) client for the BMCs: BIOS settings, firmware, chassis health, logs."""

from rackready.redfish.client import AuthError, Client, RedfishError, extended_info

__all__ = ["AuthError", "Client", "RedfishError", "extended_info"]
