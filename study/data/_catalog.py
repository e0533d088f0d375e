"""Where each paper dataset is published, its checksum and how its archive maps onto the loader's layout.

Every entry ends as ONE directory under ``--root`` (one of the loader's standard sub-folder names, so
``dataset.root: DIR`` finds it), which lets the fetch move the whole tree into place with one ``rename``.
URLs and checksums are the ones torchvision and pytorch-metric-learning use (cited per entry); where no checksum
is published (the Stanford Cars mirror, SOP's Google-Drive copy) ``--sha256`` supplies one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "INSHOP_STEPS", "DatasetEntry", "Source"]


@dataclass(frozen=True)
class Source:
    """One published file.

    Args:
        filename: the name it is saved under (``.download/<filename>``).
        url: where it is published.
        md5: the published md5 (what torchvision / the literature checks), or ``None`` when none exists.
        into: the directory (inside the temporary tree) it is extracted into, or copied into when not an archive.
        archive: ``"tar"`` (any compression ``tarfile`` reads), ``"zip"`` or ``None`` (copied as is).
    """

    filename: str
    url: str
    md5: str | None
    into: str
    archive: str | None


@dataclass(frozen=True)
class DatasetEntry:
    """A dataset's published files and the folder (under ``--root``) the extracted tree becomes."""

    name: str
    folder: str
    sources: tuple[Source, ...]
    note: str = ""


CATALOG: dict[str, DatasetEntry] = {
    # pytorch-metric-learning datasets/cub.py (URL); md5 as checked by torchvision-style CUB loaders.
    "cub200": DatasetEntry(
        "cub200",
        "CUB_200_2011",
        (
            Source(
                "CUB_200_2011.tgz",
                "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
                "97eceeb196236b17998738112f37df78",
                "",
                "tar",
            ),
        ),
    ),
    # pytorch-metric-learning datasets/sop.py: the authors' Google-Drive copy; no checksum is published.
    "sop": DatasetEntry(
        "sop",
        "Stanford_Online_Products",
        (
            Source(
                "Stanford_Online_Products.zip",
                "https://drive.usercontent.google.com/download?id=1TclrpQOF_ullUP99wk_gjGN8pKvtErG8"
                "&export=download&authuser=0&confirm=t",
                None,
                "",
                "zip",
            ),
        ),
        note="no published checksum (pass --sha256 to pin one)",
    ),
    # The official site is gone; pytorch-metric-learning datasets/cars196.py reads this class-per-folder mirror:
    # {names.csv, anno_train.csv, anno_test.csv, car_data/car_data/{train,test}/<class name>/<image>.jpg}.
    "cars196": DatasetEntry(
        "cars196",
        "cars196",
        (
            Source(
                "stanford-car-dataset-by-classes-folder.zip",
                "https://www.kaggle.com/api/v1/datasets/download/jutrera/stanford-car-dataset-by-classes-folder",
                None,
                "cars196",
                "zip",
            ),
        ),
        note="class-folder mirror (the official site is gone); no published checksum (pass --sha256 to pin one)",
    ),
    # torchvision datasets/flowers102.py (_download_url_prefix, _file_dict).
    "flowers102": DatasetEntry(
        "flowers102",
        "flowers102",
        (
            Source(
                "102flowers.tgz",
                "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/102flowers.tgz",
                "52808999861908f626f3c1f4e79d11fa",
                "flowers102",
                "tar",
            ),
            Source(
                "imagelabels.mat",
                "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/imagelabels.mat",
                "e0620be6f572b9609742df49c70aed4d",
                "flowers102",
                None,
            ),
        ),
    ),
    # torchvision datasets/cifar.py (url, tgz_md5).
    "cifar10": DatasetEntry(
        "cifar10",
        "cifar-10-batches-py",
        (
            Source(
                "cifar-10-python.tar.gz",
                "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                "c58f30108f718f92721af3b95e74349a",
                "",
                "tar",
            ),
        ),
    ),
}

#: In-Shop's host (Google Drive behind a request form) needs a login, so the fetch only prints these steps.
INSHOP_STEPS = """\
DeepFashion In-Shop Clothes Retrieval cannot be downloaded without a login. By hand:
  1. Request access at https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html
     (the page links the Google-Drive folder "In-shop Clothes Retrieval Benchmark").
  2. Download Img/img.zip and Eval/list_eval_partition.txt from that folder.
  3. mkdir -p "{root}/In-shop Clothes Retrieval Benchmark/Eval"
     unzip img.zip -d "{root}/In-shop Clothes Retrieval Benchmark"   # gives img/WOMEN/..., img/MEN/...
     cp list_eval_partition.txt "{root}/In-shop Clothes Retrieval Benchmark/Eval/"
  4. Set dataset.root: {root} (dataset.name: inshop)."""
