"""`release-bench asv-publish`: asv's dashboard, made to work without internet.

asv's pages load jQuery, flot, bootstrap and friends from CDNs, so they stay blank on a
machine without internet (a GPU runner, this kind of sandbox). `publish` serves the same files
from the html folder, taken from the npm registry once and cached in .asv/vendor (or
$RELEASE_BENCH_VENDOR_CACHE). `release-bench asv-vendor` fills the cache ahead of time; with
$RELEASE_BENCH_NO_DOWNLOAD set (the test suite sets it: its traffic stays on loopback), a
package missing from the cache is not vendored instead of downloaded.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

from harness import records

# stupidtable 1.0.1 was never published to npm; 1.1.3 keeps its API.
CDN_FILES: dict[str, tuple[str, str, str]] = {  # URL file name -> (npm package, version, path)
    "jquery-3.3.1.min.js": ("jquery", "3.3.1", "dist/jquery.min.js"),
    "jquery.flot.min.js": ("flot", "0.8.3", "jquery.flot.js"),
    "jquery.flot.time.min.js": ("flot", "0.8.3", "jquery.flot.time.js"),
    "jquery.flot.selection.min.js": ("flot", "0.8.3", "jquery.flot.selection.js"),
    "jquery.flot.categories.min.js": ("flot", "0.8.3", "jquery.flot.categories.js"),
    "jquery.flot.orderBars.js": ("flot-orderbars", "1.0.0", "js/jquery.flot.orderBars.js"),
    "stupidtable.min.js": ("stupid-table-plugin", "1.1.3", "stupidtable.min.js"),
    "md5.min.js": ("blueimp-md5", "2.19.0", "js/md5.min.js"),
    "bootstrap.min.js": ("bootstrap", "3.1.1", "dist/js/bootstrap.min.js"),
    "bootstrap.min.css": ("bootstrap", "3.1.1", "dist/css/bootstrap.min.css"),
}
EXTRA_FILES = {("bootstrap", "3.1.1"): "dist/fonts/"}  # what bootstrap.min.css refers to
NPM_REGISTRY = "https://registry.npmjs.org"
VENDOR_CACHE_ENV = "RELEASE_BENCH_VENDOR_CACHE"
NO_DOWNLOAD_ENV = "RELEASE_BENCH_NO_DOWNLOAD"


def vendor_cache() -> Path:
    """Where the npm packages are kept: $RELEASE_BENCH_VENDOR_CACHE, else .asv/vendor here."""
    return Path(os.environ.get(VENDOR_CACHE_ENV) or ".asv/vendor")


def _npm_tarball(name: str, version: str, cache: Path) -> tarfile.TarFile:
    path = cache / f"{name}-{version}.tgz"
    if not path.exists():
        if os.environ.get(NO_DOWNLOAD_ENV):
            raise OSError(f"{path.name} is not in {cache} and {NO_DOWNLOAD_ENV} is set "
                          "(release-bench asv-vendor fills the cache)")
        url = f"{NPM_REGISTRY}/{name}/-/{name}-{version}.tgz"
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
        cache.mkdir(parents=True, exist_ok=True)
        records.write_bytes_atomic(path, data)
    return tarfile.open(fileobj=io.BytesIO(path.read_bytes()), mode="r:gz")


def fetch(cache: Path | None = None) -> list[str]:
    """Download each npm package the dashboard needs into the cache (`vendor_cache()`), where
    it is not there yet; one line per package that could not be had."""
    cache = cache or vendor_cache()
    problems = []
    for name, version in sorted({(name, version) for name, version, _ in CDN_FILES.values()}):
        try:
            _npm_tarball(name, version, cache)
        except Exception as e:  # offline, registry down: said, the others still fetched
            problems.append(f"{name} {version}: {type(e).__name__}: {e}")
    return problems


def vendor_dashboard(html_dir: str | Path, cache: str | Path | None = None) -> list[str]:
    """Point asv's index.html at local copies of its CDN dependencies (from `cache`, by
    default `vendor_cache()`).

    Returns one line per dependency that could not be made local (the page then still needs
    internet for it)."""
    html_dir, cache = Path(html_dir), Path(cache) if cache else vendor_cache()
    index = html_dir / "index.html"
    page = index.read_text()
    problems = []
    for url in sorted(set(re.findall(r'(?:src|href)="(https://[^"]+)"', page))):
        entry = CDN_FILES.get(url.rsplit("/", 1)[-1])
        if entry is None:
            continue  # a link, not a dependency (the asv project page)
        name, version, member = entry
        try:
            tar = _npm_tarball(name, version, cache)
            wanted = [member]
            extra = EXTRA_FILES.get((name, version))
            if extra:
                wanted += [m.name[len("package/"):] for m in tar.getmembers()
                           if m.name.startswith(f"package/{extra}") and m.isfile()]
            for rel in wanted:
                data = tar.extractfile(f"package/{rel}").read()
                records.write_bytes_atomic(html_dir / "vendor" / name / rel, data)
        except Exception as e:  # offline, registry down: keep the CDN link, say so
            problems.append(f"{url}: not vendored ({type(e).__name__}: {e})")
            continue
        page = _repoint(page, url, f"vendor/{name}/{member}", html_dir)
    records.write_text_atomic(index, page)
    return problems


def _repoint(page: str, url: str, local: str, html_dir: Path) -> str:
    """Point the tag that loads `url` at `local`, with an integrity hash of the local copy
    (npm's flot is the unminified source of cdnjs's minified file, so the old hash fails)."""
    digest = base64.b64encode(hashlib.sha512((html_dir / local).read_bytes()).digest())

    def fix(tag: re.Match) -> str:
        text = tag.group(0).replace(f'"{url}"', f'"{local}"')
        return re.sub(r'integrity="[^"]*"', f'integrity="sha512-{digest.decode()}"', text)

    return re.sub(r"<(?:script|link)[^>]*\"" + re.escape(url) + r"\"[^>]*>", fix, page)


def publish(config: str = "asv.conf.json") -> Path:
    """`asv publish`, then make the pages work offline (see vendor_dashboard)."""
    asv = Path(sys.executable).with_name("asv")
    subprocess.run([str(asv) if asv.exists() else "asv", "publish", "--config", config],
                   check=True)
    conf = json.loads(re.sub(r"^\s*//.*$", "", Path(config).read_text(), flags=re.M))
    html_dir = Path(config).parent / conf.get("html_dir", "html")
    for line in vendor_dashboard(html_dir):
        print(f"asv-publish: {line}", file=sys.stderr)
    return html_dir
