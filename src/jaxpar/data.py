"""Real MNIST: downloaded once, checked against its published SHA-256, then read from a cache."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import math
import os
import struct
import tempfile
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxpar._checks import shown

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
"""The Google Cloud mirror of MNIST that TensorFlow Datasets downloads from."""

MNIST_SHA256: dict[str, str] = {
    "train-images-idx3-ubyte.gz": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
    ),
    "train-labels-idx1-ubyte.gz": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
    ),
    "t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    ),
}
"""The four MNIST files and the SHA-256 of each, as listed by TensorFlow Datasets."""

_TRAIN_IMAGES, _TRAIN_LABELS, _TEST_IMAGES, _TEST_LABELS = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
_FILES = (_TRAIN_IMAGES, _TRAIN_LABELS, _TEST_IMAGES, _TEST_LABELS)
_TIMEOUT_S = 60.0
_CHUNK = 1 << 20

# IDX type code -> big-endian dtype of the stored values.
_IDX_TYPES: dict[int, str] = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


class DatasetUnavailableError(RuntimeError):
    """A dataset file that is neither in the cache nor downloadable.

    Attributes:
        file_name: the missing file, such as ``"train-images-idx3-ubyte.gz"``.
        cache_dir: the directory it was looked for in.
        url: the address it was (or, with ``download=False``, would have been) fetched from.
        reason: why it could not be downloaded.
    """

    def __init__(self, file_name: str, cache_dir: Path, url: str, reason: str) -> None:
        self.file_name = file_name
        self.cache_dir = cache_dir
        self.url = url
        self.reason = reason
        super().__init__(
            f"cannot load MNIST: {file_name} is not in the cache directory {cache_dir}, "
            f"and it could not be downloaded from {url}: {reason}. Connect to the network and "
            f"call load_mnist() again, copy the four MNIST files ({', '.join(_FILES)}) into "
            f"{cache_dir}, or set JAXPAR_DATA to a directory that already holds them."
        )


class ChecksumMismatchError(RuntimeError):
    """A dataset file whose SHA-256 is not the published one.

    Attributes:
        file_name: the file, such as ``"train-images-idx3-ubyte.gz"``.
        expected: the published SHA-256, in hex.
        actual: the SHA-256 of the bytes at hand, in hex.
    """

    def __init__(self, file_name: str, expected: str, actual: str, detail: str) -> None:
        self.file_name = file_name
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{file_name} has SHA-256 {actual}, but the published MNIST file has {expected}. "
            f"{detail}"
        )


@dataclass(frozen=True, eq=False)
class MNIST:
    """The MNIST digits as NumPy arrays, straight from the IDX files.

    Attributes:
        train_images: ``uint8`` pixels in 0..255, shape ``(60000, 28, 28)``.
        train_labels: ``uint8`` digits in 0..9, shape ``(60000,)``.
        test_images: ``uint8`` pixels in 0..255, shape ``(10000, 28, 28)``.
        test_labels: ``uint8`` digits in 0..9, shape ``(10000,)``.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def parse_idx(data: bytes) -> np.ndarray:
    """Read an array stored in the IDX format of the MNIST files, gzip-compressed or not.

    An IDX file starts with two zero bytes, a type code (``0x08`` unsigned byte, ``0x09``
    signed byte, ``0x0B`` short, ``0x0C`` int, ``0x0D`` float, ``0x0E`` double) and the
    number of dimensions; then comes one big-endian 32-bit size per dimension, and the
    values, big-endian, in row-major order. Data that starts with the gzip magic bytes
    ``1f 8b`` is decompressed first.

    Args:
        data: the contents of the file, for example ``Path(...).read_bytes()``.

    Returns:
        A writable array in native byte order, with the file's dimensions and value type.

    Raises:
        TypeError: ``data`` is not bytes (a ``str``, a path, ``None``).
        ValueError: the data is not valid gzip or not IDX (bad magic bytes, an unknown type
            code, a truncated header), or it holds more or fewer bytes than its dimensions say.

    Examples:
        A 2 x 3 array of unsigned bytes, parsed plain and gzip-compressed:

        ```python
        import gzip
        import struct

        from jaxpar import parse_idx

        header = bytes([0, 0, 0x08, 2]) + struct.pack(">2I", 2, 3)
        data = header + bytes([0, 1, 2, 3, 4, 5])
        print(parse_idx(data).tolist())
        #> [[0, 1, 2], [3, 4, 5]]
        print(parse_idx(gzip.compress(data)).dtype)
        #> uint8
        try:
            parse_idx(data[:-1])
        except ValueError as error:
            print(error)
            '''
            the IDX data has dimensions (2, 3) of 1-byte values, so 6 bytes of values after its 12-byte header, but it has 5. The file is truncated or corrupt: download it again.
            '''
        ```
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(
            f"parse_idx needs the contents of an IDX file as bytes, got {shown(data)}. Read "
            f"the file in binary mode: "
            f"parse_idx(Path(file).read_bytes())."
        )
    data = bytes(data)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            raise ValueError(
                f"the data starts with the gzip magic bytes 1f 8b but does not decompress "
                f"({error}); the file is truncated or corrupt: download it again."
            ) from error
    if len(data) < 4:
        raise ValueError(
            f"the data is {len(data)} bytes long, too short for the 4-byte IDX magic number; "
            f"pass the whole contents of an IDX file such as train-images-idx3-ubyte."
        )
    if data[:2] != b"\x00\x00":
        raise ValueError(
            f"the data does not start with an IDX magic number: its first bytes are "
            f"{data[:4].hex(' ')}, but an IDX file starts with 00 00, a type code and the "
            f"number of dimensions. Pass the contents of an IDX file such as "
            f"train-images-idx3-ubyte (gzip-compressed or not)."
        )
    type_code, ndim = data[2], data[3]
    if type_code not in _IDX_TYPES:
        known = ", ".join(f"0x{code:02X}" for code in _IDX_TYPES)
        raise ValueError(
            f"the IDX data has type code 0x{type_code:02X}, which is not one of the IDX "
            f"types ({known}); the file is corrupt or not an IDX file."
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(
            f"the IDX data declares {ndim} dimensions, so a {header}-byte header, but it is "
            f"only {len(data)} bytes long; the file is truncated or corrupt: download it again."
        )
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_IDX_TYPES[type_code])
    expected = math.prod(shape) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        raise ValueError(
            f"the IDX data has dimensions {shape} of {dtype.itemsize}-byte values, so "
            f"{expected} bytes of values after its {header}-byte header, but it has {actual}. "
            f"The file is truncated or corrupt: download it again."
        )
    values = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))


def load_mnist(
    cache_dir: str | Path | None = None,
    *,
    download: bool = True,
    base_url: str = MNIST_URL,
) -> MNIST:
    """Load MNIST from a local cache, downloading the missing files first.

    Each of the four files (``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz``) is read from
    ``cache_dir`` when its SHA-256 is the published one. Otherwise it is downloaded from
    ``base_url`` (about 11 MB in all), checked, and stored in ``cache_dir`` for next time;
    a cached copy with the wrong SHA-256 is replaced. Without a network, copy the four
    files into the cache directory yourself. ``load_mnist().train_images.shape`` is then
    ``(60000, 28, 28)``.

    Args:
        cache_dir: where the files live; by default ``$JAXPAR_DATA`` if that is set, else
            ``~/.cache/jaxpar/mnist``.
        download: fetch the files that are missing from the cache; with ``False``, a missing
            file is an error and nothing touches the network.
        base_url: the directory URL the files are fetched from (``base_url`` + file name).

    Returns:
        An ``MNIST`` with ``uint8`` arrays: 60000 training and 10000 test images of 28 x 28
        pixels, and their labels.

    Raises:
        TypeError: ``cache_dir`` is not a path.
        NotADirectoryError: the cache directory is a file.
        DatasetUnavailableError: a file is not in the cache and cannot be downloaded
            (``download=False``, no network, or the server failed); it names the file, the
            cache directory, the URL, the reason and the fixes.
        ChecksumMismatchError: a downloaded file has the wrong SHA-256 (it is deleted), or,
            with ``download=False``, the cached copy has (it is kept).
        ValueError: a file that passed its checksum does not hold MNIST-shaped arrays.

    Examples:
        Without the files and without downloading, the error says which file is missing
        and where it was looked for:

        ```python
        import tempfile

        from jaxpar import DatasetUnavailableError, load_mnist

        with tempfile.TemporaryDirectory() as empty:
            try:
                load_mnist(empty, download=False)
            except DatasetUnavailableError as error:
                print(error.file_name)
                #> train-images-idx3-ubyte.gz
                print(error.reason)
                #> download=False, so nothing was fetched
        ```
    """
    if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
        raise TypeError(
            f"cache_dir must be the path of a directory, as a str or a pathlib.Path, or None "
            f"for the default ($JAXPAR_DATA, else ~/.cache/jaxpar/mnist); got {cache_dir!r}."
        )
    directory = _default_cache_dir() if cache_dir is None else Path(cache_dir).expanduser()
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(
            f"the MNIST cache directory {directory} is a file, not a directory. Pass as "
            f"cache_dir (or set JAXPAR_DATA to) a directory that holds the four MNIST files, "
            f"or will hold them once downloaded."
        )
    arrays = {name: parse_idx(_fetch(name, directory, download, base_url)) for name in _FILES}
    train_images, train_labels = _check_split(arrays, _TRAIN_IMAGES, _TRAIN_LABELS)
    test_images, test_labels = _check_split(arrays, _TEST_IMAGES, _TEST_LABELS)
    return MNIST(train_images, train_labels, test_images, test_labels)


def _default_cache_dir() -> Path:
    configured = os.environ.get("JAXPAR_DATA")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "jaxpar" / "mnist"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fetch(name: str, directory: Path, download: bool, base_url: str) -> bytes:
    """The bytes of ``name`` with the published checksum, from the cache or the network."""
    expected = MNIST_SHA256[name]
    path = directory / name
    url = base_url.rstrip("/") + "/" + name
    cached = path.read_bytes() if path.is_file() else None
    stale = ""
    if cached is not None:
        actual = _sha256(cached)
        if actual == expected:
            return cached
        if not download:
            raise ChecksumMismatchError(
                name,
                expected,
                actual,
                f"The copy in {directory} is corrupt or another dataset (Fashion-MNIST uses "
                f"the same file names); it was kept. Delete it and call load_mnist() with "
                f"download=True, or copy the right file there.",
            )
        stale = f" (the copy already in the cache has SHA-256 {actual}, not {expected})"
    if not download:
        raise DatasetUnavailableError(
            name, directory, url, "download=False, so nothing was fetched"
        )
    return _download(name, directory, url, expected, stale)


def _download(name: str, directory: Path, url: str, expected: str, stale: str) -> bytes:
    """Download ``url`` into ``directory / name`` through a temporary file, and check it."""
    temporary: Path | None = None
    chunks: list[bytes] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
        temporary = Path(temporary_name)
        with (
            os.fdopen(handle, "wb") as out,
            urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response,
        ):
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                chunks.append(chunk)
    except (OSError, http.client.HTTPException, ValueError) as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        reason = (str(error) or type(error).__name__) + stale
        raise DatasetUnavailableError(name, directory, url, reason) from error
    data = b"".join(chunks)
    actual = _sha256(data)
    if actual != expected:
        temporary.unlink(missing_ok=True)
        raise ChecksumMismatchError(
            name,
            expected,
            actual,
            f"It was downloaded from {url} and deleted. Call load_mnist() again; if the "
            f"mismatch persists, the mirror has changed: pass another base_url, or copy "
            f"the right file into {directory}.",
        )
    os.replace(temporary, directory / name)
    return data


def _check_split(
    arrays: dict[str, np.ndarray], images_name: str, labels_name: str
) -> tuple[np.ndarray, np.ndarray]:
    images, labels = arrays[images_name], arrays[labels_name]
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"{images_name} holds an array of shape {images.shape}, but MNIST images have "
            f"shape (N, 28, 28); the file is not the MNIST one."
        )
    if labels.ndim != 1:
        raise ValueError(
            f"{labels_name} holds an array of shape {labels.shape}, but MNIST labels have "
            f"shape (N,); the file is not the MNIST one."
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{images_name} holds {len(images)} images but {labels_name} holds "
            f"{len(labels)} labels; they must be the same number. One of the files is not "
            f"the MNIST one."
        )
    return images, labels
