"""How the window draws cheaply without drawing differently: live plot lines split in a body and a
tail, and a streamed reply split in one-line paragraphs."""

from __future__ import annotations

import numpy as np
import pytest

import app.ui.pane.transcript as transcript
from app.ui.docks.plots import WINDOW_S, PlotsPanel
from app.ui.pane.transcript import Transcript
from app.workspace.metrics import MetricsStore

pytestmark = pytest.mark.gui

REPLY = (
    "The printing press was invented by Johannes Gutenberg around 1440, and it changed how knowledge "
    "spread across Europe. Books became cheaper, literacy rose, and ideas moved faster than ever.\n\n"
    "1. **Movable type** made pages quick to set.\n2. Paper mills spread, so paper got cheap, and this "
    "line is long enough to wrap more than once in a pane of this width, as replies often do."
)
QUESTION = [{"role": "user", "content": "Tell me about the printing press."}]


def _stream(view: Transcript, qapp, text: str = REPLY, asked=QUESTION) -> None:
    view.begin_reply(asked)
    for i in range(0, len(text), 5):
        view.append_reply(text[i : i + 5])
        qapp.processEvents()


def _split_and_whole(qtbot, monkeypatch, size: tuple[int, int], play) -> tuple[Transcript, Transcript]:
    """Two transcripts of `size` that `play(view)` drives alike: the first splits streamed lines
    into paragraphs, as the window does; the second keeps the reply one paragraph."""
    split, whole = Transcript(), Transcript()
    for view in (split, whole):
        qtbot.addWidget(view)
        view.resize(*size)
        view.show()
    play(split)
    with monkeypatch.context() as m:
        m.setattr(transcript, "_split_finished_lines", lambda cursor: None)
        play(whole)
    return split, whole


def test_a_streamed_reply_in_one_line_paragraphs_looks_like_one_paragraph(qtbot, qapp, monkeypatch):
    split, whole = _split_and_whole(qtbot, monkeypatch, (380, 420), lambda view: _stream(view, qapp))
    assert split.document().blockCount() > whole.document().blockCount() + 1  # it did split the unfinished block
    assert split.grab().toImage() == whole.grab().toImage()  # and looks the same, pixel for pixel
    finished = [*QUESTION, {"role": "assistant", "content": REPLY}]
    for view in (split, whole):
        view.show_messages(finished)
    assert split.toPlainText() == whole.toPlainText()
    assert split.grab().toImage() == whole.grab().toImage()


def test_a_reply_resized_while_it_streams_wraps_to_the_new_width(qtbot, qapp, monkeypatch):
    half = len(REPLY) // 2

    def play(view: Transcript) -> None:
        _stream(view, qapp, REPLY[:half])
        view.resize(290, 420)  # a pane added beside it, say
        qapp.processEvents()
        for i in range(half, len(REPLY), 5):
            view.append_reply(REPLY[i : i + 5])
            qapp.processEvents()

    split, whole = _split_and_whole(qtbot, monkeypatch, (380, 420), play)
    assert split.grab().toImage() == whole.grab().toImage()


def test_two_overflowing_replies_each_show_once_and_as_one_paragraph_would(qtbot, qapp, monkeypatch):
    """Short panes: the scroll bar appears mid-reply, which narrows the text (a resize mid-insert)."""
    second = [*QUESTION, {"role": "assistant", "content": REPLY}, {"role": "user", "content": "And then?"}]

    def play(view: Transcript) -> None:
        _stream(view, qapp)
        view.show_messages(second[:2])
        _stream(view, qapp, asked=second)  # the second reply still streaming

    split, whole = _split_and_whole(qtbot, monkeypatch, (380, 160), play)
    assert split.verticalScrollBar().isVisible()
    assert split.grab().toImage() == whole.grab().toImage()
    split.show_messages([*second, {"role": "assistant", "content": REPLY}])
    text = split.toPlainText()  # each reply once: the streamed copy gave way to the rendered one
    assert text.count("Assistant") == 2 and text.count("invented by Johannes Gutenberg") == 2


@pytest.fixture
def panel(qtbot):
    metrics = MetricsStore()
    metrics.add_pane("p")
    view = PlotsPanel(metrics)
    qtbot.addWidget(view)
    view.resize(600, 900)
    view.add_pane("p", "#1f77b4")
    return view


def _drawn(series) -> np.ndarray:
    """The points a series' path items draw, in order (each piece and the tail start on the point
    before them)."""
    points = []
    for item in series.items:
        path = item.path()
        run = [(path.elementAt(i).x, path.elementAt(i).y) for i in range(path.elementCount())]
        points += run[1:] if points else run
    return np.array(points).reshape(-1, 2)


def test_a_plot_line_shows_the_ring_as_a_body_and_a_tail(panel):
    ring = panel.metrics.panes["p"].tok_rate
    series = panel.pane_curves["p"]["rate"]
    t0 = panel.t0
    now = t0 + 0.05
    shown = []
    for tick in range(95):  # 9.5 s at 10 Hz
        now += 0.1
        ring.push(now, float(tick))
        body_before = series.body.getData()[0]
        panel.refresh(now)
        drawn, t, v = _drawn(series), *ring.view()
        assert np.allclose(drawn[:, 0], t - t0) and np.array_equal(drawn[:, 1], v)  # every point, once, in order
        slid = series.body.getData()[0] is not body_before
        shown.append((slid, len(series.tail.getData()[0])))
        # time runs right to left: the items sit one whole second ahead of the fixed x range
        assert {item.pos().x() for item in series.items} == {-np.ceil(now - t0)}
    slides = [tick for tick, (slid, _) in enumerate(shown) if slid]
    assert len(slides) == 10  # the body is rebuilt once a second ...
    assert all(tail == 0 for slid, tail in shown if slid)
    assert max(tail for _, tail in shown) >= 9  # ... and between, only the tail grows
    assert all(not item.path().isEmpty() for item in series.body.items)  # in pieces: a tick strokes the last


def test_old_points_leave_the_body(panel):
    ring = panel.metrics.panes["p"].tok_rate
    now = panel.t0
    for _ in range(int(3 * WINDOW_S)):
        now += 1.0
        ring.push(now, 1.0)
        panel.refresh(now)
    x, _ = panel.pane_curves["p"]["rate"].getData()
    assert x[0] >= now - panel.t0 - WINDOW_S - 3 and len(x) < 2 * WINDOW_S


def test_request_points_stay_drawn_as_time_slides(panel, qapp):
    pane = panel.metrics.panes["p"]
    panel.show()  # painted from the start, as in the window
    now = panel.t0
    for tick in range(40):  # 4 s: the items move left once a second, before and after the points arrive
        now += 0.1
        pane.tok_rate.push(now, 5.0)
        if tick == 25:
            pane.kv_hit.push(now, 0.5)
            pane.ttft.push(now, 0.5)
        panel.refresh(now)
        qapp.processEvents()
    image = panel.grab().toImage()
    for name in ("hit", "ttft"):
        item = panel.point_sets[name]
        (x,), (y,) = panel.points("p", name)
        at = panel.mapFromScene(item.mapToScene(x, y))
        assert image.pixelColor(at).name() == "#1f77b4", name  # the pane's colour, where the point is
