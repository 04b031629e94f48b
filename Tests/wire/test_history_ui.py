"""The history browser (/ui/) in a real browser: headless Chromium from Debian driven through
Selenium with Debian's chromedriver (nothing is downloaded). A dataset with a removed key, a
device, hostile values and an erased value is written through the API; the test signs in with
the admin credential in the page and checks what a person sees: the timeline, a record's
history, a diff, the dataset as of a point, the integrity status. An identity credential cannot
open the page, and no /admin/ui/ request or /ui/ page is answered unsigned.

Screenshots go to the test's temporary directory, and to docs/screenshots when
SYNCLEDGER_UI_SCREENSHOTS=1."""

import os
import re
import shutil
import subprocess
from urllib.parse import quote

import pytest
import requests
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

# Not skipped when missing: tools/test installs selenium.
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REPO, Dataset, Server, new_id

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>window.__pwned = 1</script>"
SECRET_VALUE = "hunter2-erase-me"



def ui_url(server, key=ADMIN_KEY, secret=ADMIN_SECRET):
    """`syncledger ui-url` for this server, with the credential in the environment."""
    env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=key, SYNCLEDGER_SECRET_ACCESS_KEY=secret)
    out = subprocess.run([BINARY, "ui-url", "--data", server.data_dir, "--url", server.url],
                         capture_output=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out.stdout.decode().strip()


def botocore_presigned(server, key, secret):
    """A presigned /ui/ URL made by botocore (not by SyncLedger)."""
    request = AWSRequest(method="GET", url=server.url + "/ui/")
    SigV4QueryAuth(Credentials(key, secret), "cognito-sync", "us-east-1", expires=600).add_auth(request)
    return request.url


def write(ds, name, values, device, removes=()):
    listing = ds.list(name)
    counts = {r["Key"]: r["SyncCount"] for r in listing["Records"]}
    patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": counts.get(k, 0)} for k, v in values.items()]
    patches += [{"Op": "remove", "Key": k, "SyncCount": counts[k]} for k in removes]
    ds.update(name, patches, token=listing["SyncSessionToken"], DeviceId=device)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    root = tmp_path_factory.mktemp("history-ui")
    server = Server(str(root / "data"))
    try:
        yield from _written(server, root)
    finally:
        server.stop()


def _written(server, root):
    pool, identity = new_id(), new_id()
    ds = Dataset(server.client(), pool, identity)
    write(ds, "profile", {"colour": "red", "size": "M"}, "phone-1")
    write(ds, "profile", {"colour": "blue"}, "tablet-2")
    write(ds, "profile", {"hostile": HOSTILE, "script": SCRIPT}, "phone-1")
    write(ds, "profile", {}, "phone-1", removes=["size"])
    write(ds, "profile", {"secret": SECRET_VALUE}, "tablet-2")
    write(ds, "profile", {"colour": "green"}, "phone-1")
    for i in range(250):
        write(ds, "long", {f"k{i % 7}": f"v{i}"}, "laptop")
    reply = server.raw("POST", "/admin/redactions", body={
        "IdentityPoolId": pool, "IdentityId": identity, "DatasetName": "profile", "Key": "secret", "Reason": "test"})
    assert reply.status_code == 200, reply.content
    yield server, pool, identity, root


@pytest.fixture(scope="module")
def browser(ui):
    assert os.access(CHROMEDRIVER, os.X_OK) and os.access(CHROMIUM, os.X_OK), \
        "install Debian's chromium and chromium-driver (tools/setup)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1440,1000"):
        options.add_argument(arg)
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must never download anything
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=20):
    try:
        return WebDriverWait(driver, timeout).until(condition)
    except Exception:
        # What a person would see, for the failure report.
        print("page text:", driver.find_element(By.TAG_NAME, "body").text[:3000])
        print("console:", [e["message"] for e in driver.get_log("browser")][:20] if hasattr(driver, "get_log") else "")
        raise


def screenshot(driver, ui, name):
    path = str(ui[3] / name)
    assert driver.save_screenshot(path)
    if os.environ.get("SYNCLEDGER_UI_SCREENSHOTS") == "1":
        shutil.copy(path, os.path.join(REPO, "docs", "screenshots", name))


def sign_in(driver, url, key, secret):
    driver.get(url)
    driver.execute_script("sessionStorage.clear()")
    driver.get(url)
    wait(driver, EC.visibility_of_element_located((By.ID, "signin-form")))
    driver.find_element(By.ID, "access-key").send_keys(key)
    driver.find_element(By.ID, "secret-key").send_keys(secret)
    driver.find_element(By.ID, "sign-in").click()


def detail_rows(driver, kind):
    wait(driver, lambda d: d.find_element(By.ID, "detail").get_attribute("data-kind") == kind)
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, "#detail tbody tr")]


def open_dataset(driver, ui, dataset):
    _, pool, identity, _ = ui
    wait(driver, lambda d: pool in [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "#pool option")])
    Select(driver.find_element(By.ID, "pool")).select_by_value(pool)
    wait(driver, lambda d: identity in [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "#identity option")])
    Select(driver.find_element(By.ID, "identity")).select_by_value(identity)
    Select(driver.find_element(By.ID, "dataset")).select_by_value(dataset)


def timeline(driver):
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")[:5]]
            for row in driver.find_elements(By.CSS_SELECTOR, "#timeline-rows tr")]


def test_nothing_is_answered_unsigned(ui):
    server, pool, identity, _ = ui
    stream = f"pool={quote(pool, safe='')}&identity={quote(identity, safe='')}&dataset=profile"
    for op, query in [("pools", ""), ("streams", f"pool={quote(pool, safe='')}"), ("entries", stream), ("record", stream + "&key=colour"),
                      ("diff", stream + "&from=0"), ("dataset", stream), ("status", stream)]:
        reply = server.raw("GET", "/admin/ui/" + op, query=query, sign=False)
        assert reply.status_code in (401, 403), (op, reply.status_code)
        assert b"colour" not in reply.content and b"hunter2" not in reply.content
        signed = server.raw("GET", "/admin/ui/" + op, query=query)
        assert signed.status_code == 200, (op, signed.content)
        assert signed.headers["cache-control"] == "no-store"
    page = requests.get(server.url + "/ui/", timeout=30)
    assert page.status_code == 403 and "ui-url" in page.text and "<html" not in page.text
    assert "script-src" in page.headers["content-security-policy"]


def test_the_page_is_an_empty_shell_under_a_strict_policy(ui):
    server = ui[0]
    for url in (ui_url(server), botocore_presigned(server, ADMIN_KEY, ADMIN_SECRET)):
        page = requests.get(url, timeout=30)
        assert page.status_code == 200, page.text[:300]
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+';", csp) and "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff" and page.headers["cache-control"] == "no-store"
        assert "colour" not in page.text and "http" not in re.sub(r"https?://(www\.)?w3\.org\S*", "", page.text)
    # A presigned URL for the page is no key to the data.
    query = ui_url(server).split("?", 1)[1]
    assert server.raw("GET", "/admin/ui/pools", query=query, sign=False).status_code == 403


def test_an_identity_credential_cannot_open_the_page(ui, browser):
    server, pool, identity, root = ui
    cred = server.mint(pool, identity)
    key, secret = cred["AccessKeyId"], cred["SecretAccessKey"]
    assert server.raw("GET", "/admin/ui/pools", key=key, secret=secret).status_code == 403
    browser.get(botocore_presigned(server, key, secret))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "needs the developer (admin) credential" in body and "signin-form" not in browser.page_source
    # In the page (opened by the admin's URL), the identity's key is refused and nothing shows.
    sign_in(browser, ui_url(server), key, secret)
    message = wait(browser, lambda d: d.find_element(By.ID, "signin-message").text)
    assert "cannot open the history browser" in message
    assert not browser.find_element(By.ID, "app").is_displayed()
    assert browser.execute_script("return sessionStorage.length") == 0
    screenshot(browser, ui, "history-refused.png")


def test_an_admin_browses_the_history(ui, browser):
    server, pool, identity, _ = ui
    sign_in(browser, ui_url(server), ADMIN_KEY, ADMIN_SECRET)
    open_dataset(browser, ui, "profile")
    # Six writes, then the redaction's removal of the erased key (no device).
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline-rows tr")) == 7)
    rows = timeline(browser)
    assert [r[0] for r in rows] == ["7", "6", "5", "4", "3", "2", "1"]
    assert [r[3] for r in rows] == ["—", "phone-1", "tablet-2", "phone-1", "phone-1", "tablet-2", "phone-1"]
    assert all(r[2] == f"admin:{ADMIN_KEY}" for r in rows)
    keys = [[b.text for b in row.find_elements(By.CSS_SELECTOR, "button.key")] for row in browser.find_elements(By.CSS_SELECTOR, "#timeline-rows tr")]
    assert keys == [["secret"], ["colour"], ["secret"], ["size"], ["hostile", "script"], ["colour"], ["colour", "size"]]
    assert browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='4'] button.op-remove").text == "size"
    assert browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='5'] button.op-erased").text == "secret"
    assert browser.find_element(By.ID, "page-info").text == "Sync counts 1–7 of 7"

    # Integrity: this dataset verified, the latest signed digest.
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#status .verify"))
    assert browser.find_element(By.CSS_SELECTOR, "#status .verify").text.startswith("Verified: 7 entries")
    assert re.fullmatch(r"[0-9a-f]{64}", browser.find_element(By.CSS_SELECTOR, "#status .root-hash").text)
    assert "signature valid" in browser.find_element(By.ID, "status").text

    # A record's history: the hostile values are text, the erased one says so.
    browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='3'] button.key").click()
    history = detail_rows(browser, "record")
    assert [(r[0], r[3], r[4], r[5]) for r in history] == [("3", "phone-1", "put", HOSTILE)]
    browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='5'] button.key").click()
    history = detail_rows(browser, "record")
    assert [(r[0], r[4], r[5]) for r in history] == [("5", "erased", "erased"), ("7", "remove", "removed")]
    assert browser.find_elements(By.CSS_SELECTOR, "#detail .erased")
    browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='6'] button.key").click()
    history = detail_rows(browser, "record")
    assert [(r[0], r[3], r[5]) for r in history] == [("1", "phone-1", "red"), ("2", "tablet-2", "blue"), ("6", "phone-1", "green")]

    # The dataset as of sync count 4, from the timeline row.
    browser.find_element(By.CSS_SELECTOR, "#timeline-rows tr[data-sync-count='4'] button.as-of").click()
    records = detail_rows(browser, "dataset")
    assert {r[0]: (r[1], r[2]) for r in records} == {"colour": ("blue", "2"), "hostile": (HOSTILE, "3"), "script": (SCRIPT, "3")}
    assert browser.find_element(By.ID, "detail-title").text == "Dataset as of sync count 4 (head 7)"
    screenshot(browser, ui, "history-timeline.png")

    # A diff between two points.
    for field, value in (("diff-from", "1"), ("diff-to", "6")):
        browser.find_element(By.ID, field).clear()
        browser.find_element(By.ID, field).send_keys(value)
    browser.find_element(By.ID, "diff-go").click()
    wait(browser, lambda d: d.find_element(By.ID, "detail-title").text == "Diff from sync count 1 to 6")
    lines = {r[0]: r[1:4] for r in detail_rows(browser, "diff")}
    assert lines == {"colour": ["changed", "red", "green"], "hostile": ["added", "none", HOSTILE],
                     "script": ["added", "none", SCRIPT], "secret": ["added", "none", "erased"], "size": ["removed", "M", "none"]}
    screenshot(browser, ui, "history-diff.png")

    # Nothing hostile ran and nothing erased reached the page.
    assert not browser.find_elements(By.CSS_SELECTOR, "#app img, #app script")
    assert browser.execute_script("return window.__pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert SECRET_VALUE not in browser.page_source
    # Only the derived, day-scoped signing key is kept; the secret never is.
    assert ADMIN_SECRET not in browser.execute_script("return JSON.stringify(sessionStorage)")


def test_the_timeline_pages_by_sync_count(ui, browser):
    server = ui[0]
    sign_in(browser, ui_url(server), ADMIN_KEY, ADMIN_SECRET)
    open_dataset(browser, ui, "long")

    def page(info, first, last, count):
        wait(browser, lambda d: d.find_element(By.ID, "page-info").text == info)
        numbers = [int(r[0]) for r in timeline(browser)]
        assert len(numbers) == count and numbers[0] == last and numbers[-1] == first

    page("Sync counts 151–250 of 250", 151, 250, 100)
    assert browser.find_element(By.ID, "newer").get_attribute("disabled")
    browser.find_element(By.ID, "older").click()
    page("Sync counts 51–150 of 250", 51, 150, 100)
    browser.find_element(By.ID, "older").click()
    page("Sync counts 1–50 of 250", 1, 50, 50)
    assert browser.find_element(By.ID, "older").get_attribute("disabled")
    browser.find_element(By.ID, "newer").click()
    page("Sync counts 51–150 of 250", 51, 150, 100)
    browser.find_element(By.ID, "jump").send_keys("120\n")
    page("Sync counts 21–120 of 250", 21, 120, 100)
    # A reload keeps the dataset (in the URL's fragment) and the session.
    browser.refresh()
    page("Sync counts 151–250 of 250", 151, 250, 100)
