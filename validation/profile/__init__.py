"""Hardware profiles: what the customer bought, and the limits it must meet.

A profile YAML (validation/profiles/<name>.yml) holds the expected inventory and a list
of thresholds, each with its unit, provenance and tier. One module per concern, and this
package's names are the API every reader imports:

    load              the files read and composed (extends, include, slots, provenances)
    thresholds        a written threshold checked (metric, unit, op, provenance, tier)
    not_applicable    the probe facts that make a limit not applicable on a node
    inventory_limits  the inventory's expectations as limits
    site_limits       the limits that follow the site's provisioning variables; with_site
    calibration       a site's calibrated limits over the profile's
    scope             a profile narrowed to part of a machine
"""

from __future__ import annotations

from validation.profile.calibration import calibration_thresholds
from validation.profile.errors import ProfileError
from validation.profile.inventory_limits import (
    PLACEMENTS,
    expected_pair_links,
    inventory_thresholds,
    nic_placement,
)
from validation.profile.load import PROFILE_DIR, deep_merge, list_profiles, load_profile
from validation.profile.model import Profile
from validation.profile.not_applicable import NotApplicable, check_not_applicable
from validation.profile.scope import scope
from validation.profile.site_limits import (
    IB_FABRIC_MTU,
    mlxconfig_wanted,
    roce_active_mtu,
    site_thresholds,
    with_site,
)
from validation.profile.thresholds import HEALTH_PREFIXES, OPS, check_threshold

__all__ = [
    "HEALTH_PREFIXES", "IB_FABRIC_MTU", "OPS", "PLACEMENTS", "PROFILE_DIR", "NotApplicable",
    "Profile", "ProfileError", "calibration_thresholds", "check_not_applicable",
    "check_threshold", "deep_merge", "expected_pair_links", "inventory_thresholds",
    "list_profiles", "load_profile", "mlxconfig_wanted", "nic_placement", "roce_active_mtu",
    "scope", "site_thresholds", "with_site",
]
