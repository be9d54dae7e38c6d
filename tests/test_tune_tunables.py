"""Each driver's tunables (what `vpnlab tune` may vary) are legal options, and the settings each driver
writes for its user read back as the same options."""

import itertools

import pytest

from vpnlab.catalog import DRIVERS
from vpnlab.drivers.base import SECURITY_CLASSES


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_tunables_name_options_and_their_values_are_legal(name):
    driver = DRIVERS[name]
    for tunable in driver.tunables:
        assert tunable.option in driver.Options.model_fields, (name, tunable.option)
        for value in tunable.values:
            driver.Options.model_validate({tunable.option: value})
        assert set(tunable.security.values()) <= set(SECURITY_CLASSES)


def test_the_drivers_that_have_settings_declare_them_and_pptp_is_not_proposed():
    assert {"openvpn", "wireguard", "strongswan", "libreswan", "ocserv"} <= {n for n, d in DRIVERS.items() if d.tunables}
    assert not DRIVERS["pptp"].proposed and DRIVERS["openvpn"].proposed


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_settings_read_back_as_the_same_options(name):
    driver = DRIVERS[name]
    product = itertools.product(*[[(t.option, v) for v in t.values] for t in driver.tunables])
    for combination in product:
        options = driver.Options.model_validate(dict(combination))
        for profile in ("default", "fips"):
            if driver.check(options, profile) is None:
                assert driver.from_settings(driver.settings(options, profile)) == options, (name, options, profile)
