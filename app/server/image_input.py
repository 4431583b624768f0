"""Pictures in a request: the chat API's `image_url` parts and the Responses API's `input_image`
parts read into the engine's `Image`s, a message's text holding a marker where each one goes.

A `data:` URI is read at once and its file checked (app/engine/image_file.py): a picture that
is no picture the engine reads is a 400 that says why. An `http(s)` URL is fetched only when the
server was started with --allow-image-urls, within MAX_IMAGE_BYTES and IMAGE_URL_TIMEOUT_S, by
`fetch_images`, before the request reaches the engine; otherwise it is a 400 that says so."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from dataclasses import dataclass

import aiohttp

from app.engine.image_file import MAX_IMAGE_BYTES, ImageError, check_image
from app.engine.images import IMAGE_MARKER, Image

IMAGE_URL_TIMEOUT_S = 10.0  # a fetched picture's whole download, connection included
MAX_IMAGES_IN_REQUEST = 64
_DATA_URI = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,", re.ASCII)


class ImageInputError(ValueError):
    """Why a picture part cannot be read: the 400's message; `param`: where it was."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ImageUrl:
    """An http(s) picture still to fetch (`fetch_images`)."""

    url: str
    param: str


def picture_of(url: object, param: str) -> Image | ImageUrl:
    """A part's URL: a data URI's picture (checked), or an http(s) URL to fetch."""
    if not isinstance(url, str) or not url:
        raise ImageInputError(f"{param} must be a URL: a data: URI, or http(s) where the server allows it", param)
    if url.startswith("data:"):
        return Image.of(checked(_data_uri(url, param), param))
    if url.startswith(("http://", "https://")):
        return ImageUrl(url, param)
    raise ImageInputError(f"{param}: only data: URIs (and http(s) URLs where the server allows them) are read", param)


def _data_uri(url: str, param: str) -> bytes:
    head = _DATA_URI.match(url)
    if head is None or not head.group("b64"):
        raise ImageInputError(f"{param}: a data: URI of a picture must be base64 (data:image/png;base64,...)", param)
    body = url[head.end() :]
    if len(body) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise ImageInputError(f"{param}: the picture is more than {MAX_IMAGE_BYTES >> 20} MiB", param)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ImageInputError(f"{param}: the data: URI's base64 is not valid", param) from None


def checked(data: bytes, param: str) -> bytes:
    try:
        check_image(data)
    except ImageError as e:
        raise ImageInputError(f"{param}: {e}", param) from None
    return data


def content_with_pictures(parts: list[tuple[str, Image | ImageUrl | None]]) -> tuple[str, tuple]:
    """A message's text from its parts in order, a marker where each picture goes, and the pictures."""
    pictures = tuple(p for _, p in parts if p is not None)
    if len(pictures) > MAX_IMAGES_IN_REQUEST:
        raise ImageInputError(f"at most {MAX_IMAGES_IN_REQUEST} pictures in a message", "messages")
    return "".join(IMAGE_MARKER if p is not None else text for text, p in parts), pictures


def has_urls(messages) -> bool:
    return any(isinstance(p, ImageUrl) for m in messages for p in m.get("images", ()))


async def fetch_pictures(messages: tuple[dict, ...], allowed: bool) -> dict[ImageUrl, Image]:
    """Every http(s) picture the messages show, fetched (ImageInputError: not allowed, too large,
    too slow, not a picture)."""
    urls = list(dict.fromkeys(p for m in messages for p in m.get("images", ()) if isinstance(p, ImageUrl)))
    if not urls:
        return {}
    if not allowed:
        raise ImageInputError(
            f"{urls[0].param}: this server does not fetch pictures from URLs: send it as a data: URI "
            "(or start the server with --allow-image-urls)",
            urls[0].param,
        )
    timeout = aiohttp.ClientTimeout(total=IMAGE_URL_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        fetched = await asyncio.gather(*(_fetch(session, u) for u in urls))
    return dict(zip(urls, fetched))


def with_fetched(messages: tuple[dict, ...], fetched: dict[ImageUrl, Image]) -> tuple[dict, ...]:
    """The messages with their fetched pictures in the URLs' places."""
    if not fetched:
        return messages
    return tuple({**m, "images": tuple(fetched.get(p, p) for p in m["images"])} if m.get("images") else m for m in messages)


async def _fetch(session: aiohttp.ClientSession, url: ImageUrl) -> Image:
    where = url.param
    try:
        async with session.get(url.url, max_redirects=3, headers={"Accept": "image/*"}) as response:
            if response.status != 200:
                raise ImageInputError(f"{where}: fetching the picture got HTTP {response.status}", where)
            if (response.content_length or 0) > MAX_IMAGE_BYTES:
                raise ImageInputError(f"{where}: the picture is more than {MAX_IMAGE_BYTES >> 20} MiB", where)
            data = bytearray()
            async for block in response.content.iter_chunked(1 << 16):
                data += block
                if len(data) > MAX_IMAGE_BYTES:
                    raise ImageInputError(f"{where}: the picture is more than {MAX_IMAGE_BYTES >> 20} MiB", where)
    except TimeoutError:
        raise ImageInputError(f"{where}: fetching the picture took more than {IMAGE_URL_TIMEOUT_S:g} s", where) from None
    except aiohttp.TooManyRedirects:
        raise ImageInputError(f"{where}: fetching the picture was redirected too often", where) from None
    except aiohttp.ClientError as e:
        raise ImageInputError(f"{where}: the picture could not be fetched: {e}", where) from None
    return Image.of(checked(bytes(data), where))
