"""The console page in headless Chromium (the Debian package, driven by its chromedriver through
selenium's WebDriver client): sign in, a query answered, a refusal shown, the budget bar moves,
HTML in SQL shown as text, and the accountant's report renders. Skipped without Chromium."""

from __future__ import annotations

import shutil

import pytest

from tests.test_service import start

BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(n)), None)
DRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.skipif(BROWSER is None or DRIVER is None,
                                reason="no headless Chromium and chromedriver installed")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

HOSTILE = "<img src=x onerror=document.title=1><script>document.title=2</script>"
SQL = f'SELECT state, COUNT(*) AS "{HOSTILE}" FROM people GROUP BY state'


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,1800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _sign_in(driver, url: str, token: str, section: str) -> None:
    driver.get(url + "/")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin-button").click()
    WebDriverWait(driver, 30).until(expected_conditions.visibility_of_element_located((By.ID, section)))


def _set(driver, element_id: str, text: str) -> None:
    element = driver.find_element(By.ID, element_id)
    element.clear()
    element.send_keys(text)


def test_the_console_answers_refuses_moves_the_bar_and_escapes(tmp_path, browser):
    running = start(tmp_path, policy={"budget": {"epsilon": 10.0}})
    try:
        driver = browser
        _sign_in(driver, running.url, running.tokens["ana"], "console")
        assert driver.find_element(By.ID, "who").text == "ana (analyst)"
        fill = driver.find_element(By.ID, "budget-fill")
        assert float(fill.get_attribute("data-share")) == 0.0
        _set(driver, "sql", SQL)
        _set(driver, "epsilon", "1")
        driver.find_element(By.ID, "explain-button").click()
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_element(By.ID, "cost").text.startswith("cost 1:"))
        assert "(admissible)" in driver.find_element(By.ID, "cost").text
        assert float(fill.get_attribute("data-share")) == 0.0  # the cost shown spent nothing
        # An AVG's expected error is its own (a formula in its group's n), never its SUM's.
        _set(driver, "sql", "SELECT AVG(age) AS mean_age, COUNT(*) AS n FROM people")
        driver.find_element(By.ID, "explain-button").click()
        wait.until(lambda d: "mean_age" in d.find_element(By.ID, "cost").text)
        shown = driver.find_element(By.ID, "cost").text
        assert "mean_age ±(" in shown and "/ (n − " in shown and ", n ±" in shown
        assert "SUM" not in shown
        _set(driver, "sql", SQL)
        driver.find_element(By.ID, "query-button").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#result tbody tr")) == 4)
        headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#result thead th")]
        assert headers == ["state", HOSTILE]  # shown as text
        assert driver.find_element(By.ID, "result-sql").text == SQL
        assert not driver.find_elements(By.TAG_NAME, "img") and driver.title == "dpsql console"
        cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#result tbody td")]
        assert sorted(cells[0::2]) == ["CA", "NY", "TX", "WA"] and all(" ± " in c for c in cells[1::2])
        wait.until(lambda d: float(fill.get_attribute("data-share")) == pytest.approx(0.1))
        assert "level 1 of 10" in driver.find_element(By.ID, "budget-text").text
        _set(driver, "sql", "SELECT age FROM people")
        driver.find_element(By.ID, "query-button").click()
        wait.until(lambda d: d.find_element(By.ID, "error").text)
        assert driver.find_element(By.ID, "error").text.startswith("column age in SELECT refused")
        assert float(fill.get_attribute("data-share")) == pytest.approx(0.1)  # nothing charged

        driver.execute_script("sessionStorage.clear()")
        _sign_in(driver, running.url, running.tokens["acc"], "report")
        assert not driver.find_element(By.ID, "console").is_displayed()
        rows = driver.find_elements(By.CSS_SELECTOR, "#report-entries tbody tr")
        assert len(rows) == 1
        assert [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")][2:4] == ["ana", SQL]
        totals = dict((r.find_elements(By.TAG_NAME, "td")[0].text, r.find_elements(By.TAG_NAME, "td")[1].text)
                      for r in driver.find_elements(By.CSS_SELECTOR, "#report-totals tbody tr"))
        assert totals["answers"] == "1"
        assert not driver.find_elements(By.TAG_NAME, "img") and driver.title == "dpsql console"
    finally:
        running.stop()
