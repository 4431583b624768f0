"""A pane's pictures on screen: files, pastes and drops read into the engine's `Image`s (checked as
the engine will check them, or converted to PNG where only Qt reads them), the strip of pictures
attached to the next message, thumbnails, and a picture shown whole."""

from __future__ import annotations

import os
from functools import lru_cache

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QGuiApplication, QIcon, QImage, QPixmap
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QScrollArea, QToolButton, QVBoxLayout, QWidget

from app.engine.image_file import MAX_IMAGE_BYTES, ImageError, check_image
from app.engine.images import Image

FILE_FILTER = "Pictures (*.png *.jpg *.jpeg *.gif *.bmp *.webp *.tif *.tiff);;All files (*)"
THUMB = 48  # the attached strip's thumbnails, px high
TRANSCRIPT_THUMB = 96  # a sent picture's in the transcript


class PictureError(ValueError):
    """Why a file, a paste or a drop is no picture the pane can send: one line."""


def read_picture_file(path: str) -> Image:
    """A picture file as the engine takes it."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_IMAGE_BYTES:
            raise PictureError(f"{name} is {size / 2**20:.1f} MiB; a picture may be {MAX_IMAGE_BYTES >> 20} MiB")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PictureError(f"{name} could not be read: {e.strerror or e}") from None
    return picture_of_bytes(data, name)


def picture_of_bytes(data: bytes, name: str = "the picture") -> Image:
    """Bytes the engine reads as they are; a format only Qt reads (WebP, TIFF) as PNG; else why not."""
    try:
        check_image(data)
        return Image.of(data)
    except ImageError as e:
        why = str(e).removeprefix("the image ")
        if "is not a picture" in why or "does not read" in why:  # a format llama.cpp's reader lacks: Qt's may have it
            image = QImage.fromData(data)
            if not image.isNull():
                return picture_of_qimage(image)
        raise PictureError(f"{name}: {why}") from None


def picture_of_qimage(image: QImage) -> Image:
    """A picture on the clipboard or dropped as pixels, as a PNG."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    png = bytes(data.data())
    try:
        check_image(png)
    except ImageError as e:
        raise PictureError(f"the pasted picture: {str(e).removeprefix('the image ')}") from None
    return Image.of(png)


def pictures_in(mime: QMimeData) -> tuple[list[Image], list[str]]:
    """The pictures a paste or a drop holds (local files, or pixels) and why any could not be read."""
    pictures, problems = [], []
    files = [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []
    for path in files:
        try:
            pictures.append(read_picture_file(path))
        except PictureError as e:
            problems.append(str(e))
    if not files and mime.hasImage():
        try:
            pictures.append(picture_of_qimage(QImage(mime.imageData())))
        except PictureError as e:
            problems.append(str(e))
    return pictures, problems


def holds_pictures(mime: QMimeData) -> bool:
    return mime.hasImage() or (mime.hasUrls() and any(url.isLocalFile() for url in mime.urls()))


@lru_cache(maxsize=256)
def thumbnail(image: Image, height: int) -> QImage:
    """The picture scaled to `height` px (never up); a picture Qt cannot decode as a grey square."""
    decoded = QImage.fromData(image.data)
    if decoded.isNull():
        decoded = QImage(height, height, QImage.Format.Format_RGB32)
        decoded.fill(Qt.GlobalColor.gray)
    if decoded.height() > height:
        decoded = decoded.scaledToHeight(height, Qt.TransformationMode.SmoothTransformation)
    return decoded


class AttachmentStrip(QWidget):
    """The pictures attached to the next message: a thumbnail each; clicking one takes it off."""

    sigRemove = Signal(int)  # the picture's place

    def __init__(self, parent=None):
        super().__init__(parent)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(3)
        self.buttons: list[QToolButton] = []
        self.setVisible(False)

    def show_pictures(self, pictures: list[Image]) -> None:
        for button in self.buttons:
            self.row.removeWidget(button)
            button.deleteLater()
        self.buttons = []
        for i, picture in enumerate(pictures):
            thumb = thumbnail(picture, THUMB)
            button = QToolButton(toolTip=f"{_facts(picture)}: click to take it off this message")
            button.setIcon(QIcon(QPixmap.fromImage(thumb)))
            button.setIconSize(QSize(thumb.width(), thumb.height()))
            button.setAccessibleName(f"Attached picture {i + 1}")
            button.clicked.connect(lambda _checked=False, i=i: self.sigRemove.emit(i))
            self.row.addWidget(button)
            self.buttons.append(button)
        self.row.addStretch(0)
        self.setVisible(bool(pictures))


class PictureViewer(QDialog):
    """A picture whole, scaled down to fit the screen, in a window of its own."""

    def __init__(self, image: Image, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Picture · {_facts(image)}")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        pixels = QImage.fromData(image.data)
        screen = QGuiApplication.primaryScreen().availableSize() * 0.85
        if pixels.width() > screen.width() or pixels.height() > screen.height():
            pixels = pixels.scaled(screen, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
        self.label = QLabel()
        self.label.setPixmap(QPixmap.fromImage(pixels))
        area = QScrollArea()
        area.setWidget(self.label)
        area.setWidgetResizable(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(area)
        self.resize(pixels.width() + 24, pixels.height() + 24)


def _facts(image: Image) -> str:
    try:
        facts = check_image(image.data)
    except ImageError:
        return f"{len(image.data) / 1024:.0f} KiB"
    return f"{facts}, {len(image.data) / 1024:.0f} KiB"
