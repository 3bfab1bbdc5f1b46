"""Real headless Chromium for the browser tests (Debian's chromium and chromium-driver, installed
by scripts/install_chromium.sh), driven by Selenium. Selenium blocks: async tests call it through
``asyncio.to_thread`` so that the server on the test's event loop keeps running.

Screenshots go to ``test-artifacts/`` at the repository root (or ``$REMOTE_LEADER_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def artifacts_dir() -> Path:
    path = Path(os.environ.get("REMOTE_LEADER_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _unavailable(message: str) -> None:
    """Skip where no browser can run; scripts/test.sh (CI) sets REMOTE_LEADER_REQUIRE_BROWSER=1,
    which turns that skip into a failure."""
    message += "; scripts/install_chromium.sh installs it"
    if os.environ.get("REMOTE_LEADER_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


class Browser:
    def __init__(self, width: int = 1280, height: int = 1400) -> None:
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError:
            _unavailable("selenium is not installed")
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        driver = shutil.which("chromedriver")
        if binary is None or driver is None:
            _unavailable("chromium or chromedriver is not on PATH")
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(driver), options=options)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def wait(self, condition: Callable[[Any], Any], timeout: float, what: str) -> Any:
        """Poll ``condition(driver)`` until truthy; a page that reloads itself meanwhile is fine."""
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
            TimeoutException,
            WebDriverException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        def safe(driver: Any) -> Any:
            try:
                return condition(driver)
            except (IndexError, NoSuchElementException, StaleElementReferenceException, WebDriverException):
                return False

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.2).until(safe)
        except TimeoutException:
            shot = self.screenshot("failed-wait.png")
            try:
                text = self.driver.find_element("tag name", "body").text
            except WebDriverException:
                text = "(no page)"
            raise AssertionError(f"the browser never saw {what} within {timeout:.0f} s (screenshot {shot}); "
                                 f"the page said:\n{text[:3000]}") from None

    def screenshot(self, name: str) -> Path:
        path = artifacts_dir() / name
        self.driver.save_screenshot(str(path))
        return path

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def close(self) -> None:
        self.driver.quit()
