"""The portal's campaign form with the largest audience: a 5000-row CSV and the same rows as XLSX,
read as an upload (models/sending/audiences.py) and checked against a template with two variables
and a URL button, what the preview page does. Prints, for each file, the time to a preview (best
of REPEAT), the peak memory Python allocated meanwhile (tracemalloc), and the ratio against a
floor measured in the same run: the csv module alone over the same bytes, or openpyxl's
read-only reader alone over the same workbook.

    python -m bench.audience
"""

from __future__ import annotations

import csv
import io
import time
import tracemalloc

from openpyxl import Workbook, load_workbook

from models.numbers.tables import Template
from models.sending import audiences
from models.sending.campaign_inputs import MAX_RECIPIENTS

REPEAT = 5
TEMPLATE = Template(name="order_ready", language="es", status="approved", variable_count=2,
                    body_text="Hola {{1}}, tu pedido {{2}} está listo.",
                    components=[{"type": "BODY", "text": "Hola {{1}}, tu pedido {{2}} está listo."},
                                {"type": "BUTTONS", "buttons": [
                                    {"type": "URL", "text": "Ver", "url": "https://shop.example/o/{{1}}"}]}])
MAPPING = audiences.Mapping(phone=0, variables=[1, 2], buttons={0: 3})


def rows() -> list[list[str]]:
    return [[f"+56 9 {10000000 + i}", f"Cliente número {i}", f"PED-{i:06d}", f"c{i}x"] for i in range(MAX_RECIPIENTS)]


def csv_bytes() -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["telefono", "nombre", "pedido", "codigo"])
    writer.writerows(rows())
    return buffer.getvalue().encode()


def xlsx_bytes() -> bytes:
    book = Workbook(write_only=True)
    sheet = book.create_sheet()
    sheet.append(["telefono", "nombre", "pedido", "codigo"])
    for row in rows():
        sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def preview(data: bytes, filename: str) -> int:
    audience = audiences.read_audience(io.BytesIO(data), filename)
    return len(audiences.check(audience, MAPPING, TEMPLATE).recipients)


def csv_floor(data: bytes, _filename: str) -> int:
    return sum(1 for _ in csv.reader(io.StringIO(data.decode()))) - 1


def xlsx_floor(data: bytes, _filename: str) -> int:
    book = load_workbook(io.BytesIO(data), read_only=True)
    count = sum(1 for _ in book.worksheets[0].iter_rows(values_only=True)) - 1
    book.close()
    return count


def measure(work, data: bytes, filename: str) -> tuple[float, int]:
    best = float("inf")
    for _ in range(REPEAT):
        started = time.perf_counter()
        assert work(data, filename) == MAX_RECIPIENTS
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    work(data, filename)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak


def main() -> None:
    files = (("audience.csv", csv_bytes(), csv_floor), ("audience.xlsx", xlsx_bytes(), xlsx_floor))
    for filename, data, floor in files:
        seconds, peak = measure(preview, data, filename)
        floor_seconds, floor_peak = measure(floor, data, filename)
        print(f"{filename}: {len(data) / 1024:.0f} KiB, {MAX_RECIPIENTS} rows; preview {seconds * 1000:.0f} ms, "
              f"peak {peak / 2**20:.1f} MiB; floor {floor_seconds * 1000:.0f} ms, peak {floor_peak / 2**20:.1f} MiB; "
              f"floor/preview {floor_seconds / seconds:.2f}")


if __name__ == "__main__":
    main()
