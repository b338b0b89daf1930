"""Headless Chromium for the report's browser test: Debian's chromium and chromium-driver, driven
by selenium, with the network off (the report is one self-contained file).

Installs the two packages with apt-get when they are missing and this runs as root (CI's fresh
machine); says why it cannot otherwise, so that the test skips with that reason, or fails where
RESREPRO_REQUIRE_BROWSER=1 (CI sets it).
"""

from __future__ import annotations

import os
import shutil
import subprocess

PACKAGES = ["chromium", "chromium-driver"]
REQUIRE = "RESREPRO_REQUIRE_BROWSER"


def binaries() -> tuple[str, str] | None:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def install() -> str | None:
    """Chromium and its driver on PATH, installed from Debian's packages if need be; None when
    they are there, otherwise why not."""
    if binaries():
        return None
    if shutil.which("apt-get") is None:
        return "no chromium/chromedriver on PATH and no apt-get to install Debian's chromium and chromium-driver"
    if os.geteuid() != 0:
        return f"no chromium/chromedriver on PATH; install them as root: apt-get install {' '.join(PACKAGES)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES], env=env, capture_output=True, text=True)
    if done.returncode != 0:  # stale package lists on a fresh machine: refresh once, then try again
        subprocess.run(["apt-get", "update"], env=env, capture_output=True)
        done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES], env=env, capture_output=True, text=True)
    if done.returncode != 0 or not binaries():
        return f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr.strip()[-500:]}"
    return None


def start(width: int = 1400, height: int = 1000):
    """A headless Chromium under selenium that keeps the console's messages, with no network: every
    host resolves to nothing and a dead proxy stands in front (file:// pages still load)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}",
                 "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--disable-background-networking"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)
