"""``python -m study.data fetch`` against a real HTTP server on 127.0.0.1 serving small archives in each
dataset's published form: the loader reads the fetched tree, downloads resume with ``Range``, and every failure is
exit 2 with one stderr line and no half-extracted tree."""

from __future__ import annotations

import hashlib
import io
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from harness import fake_archives
from harness.fake_data import write_cars_mirror, write_cifar10, write_cub, write_flowers, write_sop
from harness.http_server import FileServer
from study.data import MARKER
from study.data.__main__ import main
from study.data._download import FetchError, download
from trainables.data import load_dataset
from trainables.datasets import DATASETS
from trainables.schema.spec import DatasetSpec

_FOLDER = {d.name: d.folder for d in DATASETS if d.sources}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["fetch", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _leftovers(root: Path) -> list[str]:
    """Anything a failed fetch must not leave: a dataset folder or a temporary extraction tree."""
    return sorted(p.name for p in root.iterdir() if p.name != ".download") if root.exists() else []


def _expected_labels(dataset: str, tmp: Path) -> dict[str, int] | None:
    """item → class as the fake writers wrote them (same seeds as harness.fake_archives.build)."""
    writers = {"cub200": write_cub, "sop": write_sop, "cars196": write_cars_mirror, "flowers102": write_flowers}
    if dataset not in writers:
        return None
    return writers[dataset](tmp)[1]


@pytest.mark.parametrize("dataset", list(_FOLDER))
def test_fetch_then_the_loader_reads_it_and_a_second_call_is_a_no_op(tmp_path, capsys, dataset):
    files, n_images = fake_archives.build(dataset, tmp_path / "src")
    root = tmp_path / "data"
    with FileServer({f"/{k}": v for k, v in files.items()}) as server:
        if len(files) == 1:
            ((name, data),) = files.items()
            args = ["--url", server.url(f"/{name}"), "--sha256", _sha(data)]
        else:  # flowers102: the base URL of its two files, one pinned checksum per file
            args = ["--url", server.url("/"), *(f"--sha256={k}={_sha(v)}" for k, v in files.items())]
        rc, out, err = _run(capsys, dataset, "--root", str(root), *args)
        assert (rc, err) == (0, ""), err
        assert f"fetched {sum(map(len, files.values()))} bytes" in out
        assert sorted(p.name for p in root.iterdir()) == [_FOLDER[dataset]]  # no .download, no .fetch-* left
        assert (root / _FOLDER[dataset] / MARKER).exists()
        requests = len(server.requests)
        rc, out, err = _run(capsys, dataset, "--root", str(root), *args)
        assert (rc, err, len(server.requests)) == (0, "", requests)  # nothing downloaded again
        assert "already complete" in out

    data = load_dataset(DatasetSpec(name=dataset, root=str(root), image_size=16), seed=0)
    assert len(data.train) + len(data.test) == n_images
    expected = _expected_labels(dataset, tmp_path / "again")
    if expected is not None:  # the labels the archive's annotations give each image, through the loader
        got = dict(zip(data.train.items, data.train.labels)) | dict(zip(data.test.items, data.test.labels))
        assert got == expected
        classes = np.unique(list(expected.values()))
        assert set(data.train.labels) == set(classes[: (classes.size + 1) // 2]) or dataset == "sop"
    else:
        written = write_cifar10(tmp_path / "again")[1]
        np.testing.assert_array_equal(data.test.labels, written["test_y"])


def test_resume_continues_with_range_and_the_file_is_byte_identical(tmp_path, capsys):
    files, _ = fake_archives.build("cub200", tmp_path / "src")
    data = files["CUB_200_2011.tgz"]
    cut = len(data) // 3
    with FileServer({"/a.tgz": data, "/c.tgz": data}, drop_after={"/a.tgz": cut, "/c.tgz": cut}) as server:
        dest = tmp_path / "dl" / "a.tgz"
        dest.parent.mkdir()
        with pytest.raises(FetchError, match=f"connection dropped after {cut} of {len(data)} bytes"):
            download(server.url("/a.tgz"), dest)
        assert dest.with_name("a.tgz.part").read_bytes() == data[:cut]
        assert download(server.url("/a.tgz"), dest) == len(data) - cut
        assert dest.read_bytes() == data
        assert server.requests == [("/a.tgz", None), ("/a.tgz", f"bytes={cut}-")]

        # The same through the command: exit 2 with one line, then the same command finishes the job.
        root = tmp_path / "data"
        args = ["cub200", "--root", str(root), "--url", server.url("/c.tgz"), "--sha256", _sha(data)]
        rc, _, err = _run(capsys, *args)
        assert rc == 2 and err.count("\n") == 1 and "connection dropped" in err and "run the same command" in err
        assert _leftovers(root) == []
        rc, _, err = _run(capsys, *args)
        assert (rc, err) == (0, "")
        assert server.requests[-1] == ("/c.tgz", f"bytes={cut}-")


def test_published_md5_is_checked_and_a_wrong_file_is_deleted(tmp_path, capsys):
    files, _ = fake_archives.build("cub200", tmp_path / "src")
    root = tmp_path / "data"
    with FileServer({"/CUB_200_2011.tgz": files["CUB_200_2011.tgz"]}) as server:
        url = server.url("/CUB_200_2011.tgz")
        rc, _, err = _run(capsys, "cub200", "--root", str(root), "--url", url)  # a mirror: the published md5 holds
    got = hashlib.md5(files["CUB_200_2011.tgz"]).hexdigest()  # noqa: S324 (the published checksum is an md5)
    assert rc == 2 and err == (
        f"error: fetch cub200: CUB_200_2011.tgz from {url} has md5 {got}, "
        "expected 97eceeb196236b17998738112f37df78 (deleted; not extracted)\n"
    )
    assert _leftovers(root) == [] and list((root / ".download").iterdir()) == []


@pytest.mark.parametrize(
    ("dataset", "name"), [("cars196", "stanford-car-dataset-by-classes-folder.zip"), ("cub200", "CUB_200_2011.tgz")]
)
def test_truncated_archive_is_one_line_and_nothing_is_left(tmp_path, capsys, dataset, name):
    """Served whole but cut short at the source (the download itself succeeds): cars196 has no published
    checksum; for cub200 the user pinned the truncated file's own sha256, so only extraction can notice."""
    files, _ = fake_archives.build(dataset, tmp_path / "src")
    short = files[name][: len(files[name]) // 2]
    root = tmp_path / "data"
    with FileServer({f"/{name}": short}) as server:
        rc, _, err = _run(
            capsys, dataset, "--root", str(root), "--url", server.url(f"/{name}"), "--sha256", _sha(short)
        )
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: fetch {dataset}: archive {name} is corrupt or truncated (")
    assert _leftovers(root) == [] and list((root / ".download").iterdir()) == []


def test_an_archive_without_the_loaders_layout_is_refused(tmp_path, capsys):
    files, _ = fake_archives.build("sop", tmp_path / "src")
    zip_bytes = files["Stanford_Online_Products.zip"]
    root = tmp_path / "data"
    with FileServer({"/x.zip": zip_bytes}) as server:  # SOP's archive given as CIFAR-10's
        url = server.url("/x.zip")
        rc, _, err = _run(capsys, "cars196", "--root", str(root), "--url", url, "--sha256", _sha(zip_bytes))
    assert rc == 2 and err.count("\n") == 1
    assert f"the archive from {url} does not hold the layout the cars196 loader reads: dataset 'cars196'" in err
    assert _leftovers(root) == []


def test_a_second_concurrent_fetch_is_refused(tmp_path, capsys):
    import fcntl

    root = tmp_path / "data"
    (root / ".download").mkdir(parents=True)
    with (root / ".download" / "cub200.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running fetch holds it
        rc, _, err = _run(capsys, "cub200", "--root", str(root), "--url", "http://127.0.0.1:9/x.tgz")
    assert rc == 2 and err == (
        f"error: fetch cub200: another fetch of cub200 into {root} is running ({root}/.download/cub200.lock is locked)\n"
    )


def test_unreachable_url_is_one_line(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/CUB_200_2011.tgz"
    rc, _, err = _run(capsys, "cub200", "--root", str(tmp_path / "data"), "--url", url)
    assert rc == 2 and err.startswith(f"error: fetch cub200: cannot reach {url}: ") and err.count("\n") == 1
    assert "Connection refused" in err
    assert _leftovers(tmp_path / "data") == []


def test_an_html_page_instead_of_the_archive_is_one_line(tmp_path, capsys):
    """What a host answers when it wants a login or a confirmation click (Kaggle, Google Drive)."""
    page = b"<html><body>Sign in to continue</body></html>"
    with FileServer({"/sop.zip": page}, content_types={"/sop.zip": "text/html; charset=utf-8"}) as server:
        url = server.url("/sop.zip")
        rc, _, err = _run(capsys, "sop", "--root", str(tmp_path / "data"), "--url", url)
    assert rc == 2 and err == (
        f"error: fetch sop: {url} answered with an HTML page instead of Stanford_Online_Products.zip "
        "(a login or confirmation page?); download it in a browser and pass its URL with --url, or see docs/notebook/data.md\n"
    )
    assert _leftovers(tmp_path / "data") == [] and list((tmp_path / "data" / ".download").iterdir()) == []


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_while_extracting_is_one_line_and_nothing_is_left(tmp_path, capsys, small_tmpfs):
    """A 40 KB archive that unpacks to 3 MB (zeros compress) on a 2 MB tmpfs: the download fits, the tree not."""
    write_cub(tmp_path / "src")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(tmp_path / "src" / "CUB_200_2011", arcname="CUB_200_2011")
        info = tarfile.TarInfo("CUB_200_2011/zeros.bin")
        info.size = 3 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    data = buf.getvalue()
    root = small_tmpfs / "data"
    with FileServer({"/CUB_200_2011.tgz": data}) as server:
        url = server.url("/CUB_200_2011.tgz")
        rc, _, err = _run(capsys, "cub200", "--root", str(root), "--url", url, "--sha256", _sha(data))
    assert rc == 2 and err.count("\n") == 1
    assert err == f"error: fetch cub200: disk full writing {root}/CUB_200_2011 (extracting CUB_200_2011.tgz) (ENOSPC)\n"
    assert _leftovers(root) == []


def test_inshop_prints_the_manual_steps_and_exits_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "study.data", "fetch", "inshop", "--root", str(tmp_path)], capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs a login" in r.stderr
    assert "list_eval_partition.txt" in r.stdout and f"{tmp_path}/In-shop Clothes Retrieval Benchmark" in r.stdout
