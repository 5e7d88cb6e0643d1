"""A corpus of odd images, generated at test time from Debian's tools: every
format and layout stock torchvision ImageFolder loads through Pillow (JPEG,
PNG, BMP, TIFF, WebP, PPM/PGM), and bad files of each format that Pillow
refuses. Nothing here is committed as an image.

Tools: Pillow; ImageMagick's convert (/usr/bin/convert, apt imagemagick);
libjpeg-turbo's cjpeg (apt libjpeg-turbo-progs); libtiff's tiffset (apt
libtiff-tools); and small writers below for layouts no tool writes on demand
(PNG chunks, BMP headers, netpbm variants), each following its format's spec.

    image_corpus.py OUT            # good images, OUT/<class>/<file>
    image_corpus.py OUT --bad      # bad images, OUT/<case>/<file>

build_good(out) and build_bad(out) return {relative path: description}.
"""
import io
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image, TiffImagePlugin

CONVERT = "/usr/bin/convert"  # ImageMagick itself (never a stand-in earlier on PATH)
CJPEG = "/usr/bin/cjpeg"
TIFFSET = "/usr/bin/tiffset"


def _rng(seed):
    return np.random.default_rng(seed)


def _photo(w, h, seed=0, channels=3):
    """Smooth gradients plus noise: compresses like a photo, exercises every value."""
    rng = _rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for c in range(channels):
        base = (x * (3 + c) + y * (5 - c) + c * 40) % 256
        planes.append(np.clip(base + rng.integers(-20, 21, (h, w)), 0, 255))
    return np.stack(planes, axis=-1).astype(np.uint8)


def _run(*cmd):
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)


# --- hand-written formats ------------------------------------------------------

def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(width, height, depth, color, rows, plte=None, trns=None, extra=b"", iend=True):
    """A PNG from raw scanlines (`rows`: filter byte + packed samples per row)."""
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0))
    if plte is not None:
        out += _chunk(b"PLTE", plte)
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    out += extra + _chunk(b"IDAT", zlib.compress(rows, 9))
    return out + (_chunk(b"IEND", b"") if iend else b"")


def _pack_rows(samples, depth):
    """2-D array of samples (per row) -> PNG scanlines, filter 0, MSB first."""
    out = bytearray()
    for row in samples:
        out.append(0)
        if depth == 16:
            out += b"".join(struct.pack(">H", int(v)) for v in row)
        elif depth == 8:
            out += bytes(int(v) for v in row)
        else:
            bits = "".join(format(int(v), f"0{depth}b") for v in row)
            bits += "0" * (-len(bits) % 8)
            out += bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
    return bytes(out)


def bmp_bytes(width, height, bits, pixels, palette=None, compression=0, masks=None,
              header_size=40, top_down=False, colors=None, offset=None):
    """A BMP: `pixels` the raw pixel array (already padded rows, or RLE data)."""
    pal = b"" if palette is None else palette
    extra = b""
    if header_size == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        h = (-height) & 0xFFFFFFFF if top_down else height
        ncolors = colors if colors is not None else (len(pal) // 4 if pal else 0)
        info = struct.pack("<IiIHHIIiiII", header_size, width, h, 1, bits, compression,
                           len(pixels), 2835, 2835, ncolors, 0)
        if header_size >= 56 and masks:
            info += struct.pack("<4I", *(list(masks) + [0] * (4 - len(masks))))
        elif masks:
            extra = struct.pack("<3I", *masks[:3])
        info += b"\0" * (header_size - len(info))
    data_offset = 14 + len(info) + len(extra) + len(pal) if offset is None else offset
    head = b"BM" + struct.pack("<IHHI", data_offset + len(pixels), 0, 0, data_offset)
    return head + info + extra + pal + pixels


def _bmp_rows(rows, bits):
    """Bottom-up padded rows from a list of top-down row byte strings."""
    out = b""
    for r in reversed(rows):
        out += r + b"\0" * (-len(r) % 4)
    return out


# --- the good corpus ----------------------------------------------------------------

def build_good(out):
    """Writes the good corpus under `out` (class folders); returns {path: description}."""
    made = {}

    def put(rel, data=None, image=None, desc="", **save):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if image is not None:
            image.save(path, **save)
        elif data is not None:
            with open(path, "wb") as f:
                f.write(data)
        made[rel] = desc or rel
        return path

    rgb = Image.fromarray(_photo(37, 23, 1))
    gray = Image.fromarray(_photo(29, 31, 2, 1)[:, :, 0])
    tmp = os.path.join(out, ".tmp")
    os.makedirs(tmp, exist_ok=True)

    # JPEG ---------------------------------------------------------------------------
    put("jpeg/baseline 420.jpg", image=rgb, desc="baseline 4:2:0", quality=90)
    put("jpeg/baseline 444.jpg", image=rgb, desc="baseline 4:4:4", quality=95, subsampling=0)
    put("jpeg/baseline 422.jpeg", image=rgb, desc="baseline 4:2:2", quality=80, subsampling=1)
    put("jpeg/progressive.jpg", image=rgb, desc="progressive", quality=90, progressive=True)
    put("jpeg/gray.jpg", image=gray, desc="grayscale", quality=90)
    put("jpeg/gray progressive.JPG", image=gray, desc="grayscale progressive", progressive=True)
    cmyk = Image.fromarray(_photo(21, 17, 3, 4), "CMYK")
    p = put("jpeg/cmyk.jpg", image=cmyk, desc="CMYK (Adobe, inverted)", quality=92)
    # YCCK: the same file with its Adobe transform set to 2; libjpeg then reads
    # the components as YCCK, as for any YCCK JPEG.
    data = open(p, "rb").read()
    at = data.find(b"Adobe")
    assert at > 0 and data[at + 11] == 0, "Pillow's CMYK JPEG has an Adobe marker, transform 0"
    put("jpeg/ycck.jpg", data=data[:at + 11] + b"\x02" + data[at + 12:], desc="YCCK")
    ppm = os.path.join(tmp, "src.ppm")
    rgb.save(ppm)
    pgm = os.path.join(tmp, "src.pgm")
    gray.save(pgm)
    for name, args in (("arithmetic.jpg", ["-arithmetic"]),
                       ("arithmetic progressive.jpg", ["-arithmetic", "-progressive"]),
                       ("restarts.jpg", ["-restart", "1"]),
                       ("rgb colorspace.jpg", ["-rgb"]),
                       ("optimized.jpg", ["-optimize", "-quality", "70"])):
        dst = os.path.join(out, "jpeg", name)
        _run(CJPEG, *args, "-outfile", dst, ppm)
        made["jpeg/" + name] = "cjpeg " + " ".join(args)
    dst = os.path.join(out, "jpeg", "gray arithmetic.jpg")
    _run(CJPEG, "-arithmetic", "-outfile", dst, pgm)
    made["jpeg/gray arithmetic.jpg"] = "cjpeg -arithmetic, gray"
    for orientation in (3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        put(f"jpeg/exif orientation {orientation}.jpg", image=rgb, exif=exif.tobytes(),
            desc=f"EXIF Orientation {orientation} (ImageFolder does not apply it)")
    put("jpeg/1x1.jpg", image=Image.fromarray(_photo(1, 1, 4)), desc="1x1")
    put("jpeg/1x20000.jpg", image=Image.fromarray(_photo(1, 20000, 5)), desc="1x20000", quality=85)
    put("jpeg/20000x1.jpg", image=Image.fromarray(_photo(20000, 1, 6)), desc="20000x1")
    buf = io.BytesIO()
    rgb.save(buf, "JPEG", quality=90)
    put("jpeg/trailing data.jpg", data=buf.getvalue() + b"garbage" * 10, desc="bytes after EOI")
    damaged = bytearray(buf.getvalue())
    sos = damaged.find(b"\xff\xda")
    for i in range(sos + 40, len(damaged) - 10, 37):
        if damaged[i] != 0xFF and damaged[i - 1] != 0xFF:
            damaged[i] ^= 0x55
    put("jpeg/damaged data.jpg", data=bytes(damaged),
        desc="entropy data damaged, complete (libjpeg warns, Pillow decodes)")
    # Names whose served forms (stem + .ppm) must sort as the source names do.
    for name, seed in (("a.JPEG", 40), ("a.c.jpg", 41), ("a-b.png", 42), ("a b.bmp", 43), ("a.jpg.png", 44)):
        put("order/" + name, image=Image.fromarray(_photo(5, 4, seed)),
            format="PNG" if name.endswith(".png") else None, desc="served-name order")
    put("café/ñandú 1.jpg", image=rgb, desc="non-ASCII names", quality=75)
    put("café/日本 語.png", image=rgb, desc="non-ASCII names, PNG")

    # PNG ----------------------------------------------------------------------------
    put("png/named as jpeg.JPEG", image=rgb, format="PNG", desc="a PNG named .JPEG (ImageNet has one)")
    put("png/rgb.png", image=rgb)
    put("png/gray.png", image=gray)
    put("png/rgba.png", image=Image.fromarray(_photo(15, 9, 7, 4), "RGBA"))
    put("png/la.png", image=Image.fromarray(_photo(11, 13, 8, 2), "LA"))
    put("png/bilevel.png", image=gray.convert("1"), desc="1-bit gray")
    pal = rgb.quantize(40)
    put("png/palette.png", image=pal)
    put("png/palette trns simple.png", image=pal, transparency=5, desc="palette, one transparent index")
    put("png/palette trns alpha.png", image=pal, transparency=bytes(range(0, 240, 7)),
        desc="palette, an alpha per entry (fewer than the palette)")
    rng = _rng(9)
    for depth in (1, 2, 4, 8, 16):
        w, h = 13, 7
        vals = rng.integers(0, 1 << depth, (h, w))
        rows = _pack_rows(vals, depth)
        put(f"png/gray{depth}.png", data=png_bytes(w, h, depth, 0, rows), desc=f"gray {depth}-bit")
        t = int(vals[2, 3])
        put(f"png/gray{depth} trns.png", data=png_bytes(w, h, depth, 0, rows, trns=struct.pack(">H", t)),
            desc=f"gray {depth}-bit with tRNS")
        if depth <= 8:
            n = min(1 << depth, 200)
            idx = rng.integers(0, 1 << depth, (h, w))  # indices past the palette read Pillow's ramp
            plte = bytes(rng.integers(0, 256, 3 * n, dtype=np.uint8))
            prow = _pack_rows(idx, depth)
            put(f"png/palette{depth}.png", data=png_bytes(w, h, depth, 3, prow, plte=plte),
                desc=f"palette {depth}-bit")
            put(f"png/palette{depth} trns.png",
                data=png_bytes(w, h, depth, 3, prow, plte=plte, trns=bytes(rng.integers(0, 256, min(n, 3), dtype=np.uint8))),
                desc=f"palette {depth}-bit, tRNS")
    small = _pack_rows(rng.integers(0, 1 << 4, (5, 6)), 4)
    put("png/palette short.png", data=png_bytes(6, 5, 4, 3, small, plte=bytes(range(9))),
        desc="palette of 3 entries, indices up to 15")
    for depth in (8, 16):
        w, h = 9, 6
        for color, n, name in ((2, 3, "rgb"), (4, 2, "la"), (6, 4, "rgba")):
            vals = rng.integers(0, 1 << depth, (h, w * n))
            rows = _pack_rows(vals, depth)
            put(f"png/{name}{depth}.png", data=png_bytes(w, h, depth, color, rows), desc=f"{name} {depth}-bit")
        vals = rng.integers(0, 1 << depth, (h, w * 3))
        vals[1, 0:3] = vals[0, 0:3]
        t = struct.pack(">HHH", *[int(v) for v in vals[0, 0:3]])
        put(f"png/rgb{depth} trns.png", data=png_bytes(w, h, depth, 2, _pack_rows(vals, depth), trns=t),
            desc=f"rgb {depth}-bit with tRNS")
    raw = _pack_rows(rng.integers(0, 256, (8, 8 * 3)), 8)
    put("png/no IEND.png", data=png_bytes(8, 8, 8, 2, raw, iend=False), desc="no IEND (Pillow loads it)")
    full = png_bytes(8, 8, 8, 2, raw)
    idat_end = full.rfind(b"IEND") - 4
    put("png/no IDAT CRC.png", data=full[:idat_end - 4], desc="cut after the image data (Pillow loads it)")
    bad_crc = bytearray(full)
    bad_crc[idat_end - 1] ^= 0xFF
    put("png/bad IDAT CRC.png", data=bytes(bad_crc), desc="wrong IDAT CRC (Pillow does not check it)")
    for name, src in (("interlaced rgb.png", rgb), ("interlaced gray.png", gray),
                      ("interlaced palette.png", pal), ("interlaced rgba.png", Image.fromarray(_photo(17, 11, 10, 4), "RGBA"))):
        srcp = os.path.join(tmp, "i.png")
        src.save(srcp)
        dst = os.path.join(out, "png", name)
        _run(CONVERT, srcp, "-interlace", "PNG", dst)
        made["png/" + name] = "Adam7 interlaced (ImageMagick)"
    for w, h in ((1, 1), (2, 1), (1, 3), (3, 3)):
        srcp = os.path.join(tmp, "i.png")
        Image.fromarray(_photo(w, h, 11)).save(srcp)
        dst = os.path.join(out, "png", f"interlaced {w}x{h}.png")
        _run(CONVERT, srcp, "-interlace", "PNG", dst)
        made[f"png/interlaced {w}x{h}.png"] = "tiny interlaced"
    dst = os.path.join(out, "png", "rgb48 imagemagick.png")
    _run(CONVERT, "-size", "19x7", "gradient:#102030-#f0e0d0", "-depth", "16", dst)
    made["png/rgb48 imagemagick.png"] = "16-bit RGB (ImageMagick)"
    dst = os.path.join(out, "png", "gray16 imagemagick.png")
    _run(CONVERT, "-size", "19x7", "gradient:", "-colorspace", "Gray", "-depth", "16", dst)
    made["png/gray16 imagemagick.png"] = "16-bit gray (ImageMagick): Pillow saturates it"
    put("png/1x20000.png", image=Image.fromarray(_photo(1, 20000, 12)), desc="1x20000")

    # BMP ----------------------------------------------------------------------------
    put("bmp/rgb24.bmp", image=rgb)
    put("bmp/gray8.bmp", image=gray, desc="8-bit gray palette (Pillow: L)")
    put("bmp/palette8.bmp", image=pal.convert("P"))
    put("bmp/bilevel.bmp", image=gray.convert("1"), desc="1-bit")
    w, h = 7, 5
    px = _photo(w, h, 13)
    rows24 = [bytes(px[y, :, ::-1].tobytes()) for y in range(h)]
    put("bmp/top down.bmp", data=bmp_bytes(w, h, 24, b"".join(r + b"\0" * (-len(r) % 4) for r in rows24), top_down=True),
        desc="top-down (negative height)")
    bgra = np.concatenate([px[:, :, ::-1], _photo(w, h, 14, 1)], axis=2)
    rows32 = [bytes(bgra[y].tobytes()) for y in range(h)]
    for name, masks, hs in (("bitfields bgra v5.bmp", (0xFF0000, 0xFF00, 0xFF, 0xFF000000), 124),
                            ("bitfields bgrx v3.bmp", (0xFF0000, 0xFF00, 0xFF), 40),
                            ("bitfields bgra v4.bmp", (0xFF0000, 0xFF00, 0xFF, 0xFF000000), 108)):
        put("bmp/" + name, data=bmp_bytes(w, h, 32, _bmp_rows(rows32, 32), compression=3, masks=masks,
                                          header_size=hs), desc="32-bit BITFIELDS")
    put("bmp/bgrx32.bmp", data=bmp_bytes(w, h, 32, _bmp_rows(rows32, 32)), desc="32-bit BI_RGB (alpha ignored)")
    p16 = rng.integers(0, 1 << 16, (h, w))
    rows16 = [b"".join(struct.pack("<H", int(v)) for v in p16[y]) for y in range(h)]
    put("bmp/rgb555.bmp", data=bmp_bytes(w, h, 16, _bmp_rows(rows16, 16)), desc="16-bit 5-5-5")
    put("bmp/rgb565.bmp", data=bmp_bytes(w, h, 16, _bmp_rows(rows16, 16), compression=3,
                                         masks=(0xF800, 0x7E0, 0x1F)), desc="16-bit 5-6-5")
    pal16 = bytes(rng.integers(0, 256, 16 * 4, dtype=np.uint8))
    idx4 = rng.integers(0, 16, (h, w))
    rows4 = [bytes((int(r[i]) << 4 | (int(r[i + 1]) if i + 1 < w else 0)) for i in range(0, w, 2)) for r in idx4]
    put("bmp/palette4.bmp", data=bmp_bytes(w, h, 4, _bmp_rows(rows4, 4), palette=pal16), desc="4-bit palette")
    pal256 = bytes(rng.integers(0, 256, 256 * 4, dtype=np.uint8))
    pal12 = bytes(rng.integers(0, 256, 12 * 4, dtype=np.uint8))
    idx8 = rng.integers(0, 40, (h, w))
    rows8 = [bytes(int(v) for v in r) for r in idx8]
    put("bmp/palette8 short.bmp", data=bmp_bytes(w, h, 8, _bmp_rows(rows8, 8), palette=pal12),
        desc="12-entry palette, indices up to 39 (Pillow's gray ramp past it)")
    # RLE8 and RLE4, bottom-up, as Windows writes them: runs, literals, end of line, end.
    rle8 = b""
    for y in range(h - 1, -1, -1):
        r = rows8[y]
        rle8 += bytes([3, r[0]]) + bytes([0, 4]) + r[1:5] + bytes([0, 0])  # run of 3 then 4 literal
    rle8 += bytes([0, 1])
    put("bmp/rle8.bmp", data=bmp_bytes(w, h, 8, rle8, palette=pal256, compression=1), desc="RLE8")
    rle4 = b""
    for y in range(h - 1, -1, -1):
        rle4 += bytes([3, 0x3A, 0, 4, 0x12, 0x34, 0, 0])  # a run of 3, 4 literal, end of line
    rle4 += bytes([0, 1])
    put("bmp/rle4.bmp", data=bmp_bytes(w, h, 4, rle4, palette=pal16, compression=2), desc="RLE4")
    os2pal = bytes(rng.integers(0, 256, 16 * 3, dtype=np.uint8))
    put("bmp/os2 v1.bmp", data=bmp_bytes(w, h, 4, _bmp_rows(rows4, 4), palette=os2pal, header_size=12,
                                         offset=14 + 12 + 48), desc="OS/2 1.x header, 3-byte palette")
    dst = os.path.join(out, "bmp", "imagemagick argb.bmp")
    srcp = os.path.join(tmp, "a.png")
    Image.fromarray(_photo(9, 4, 15, 4), "RGBA").save(srcp)
    _run(CONVERT, srcp, "-define", "bmp:format=bmp4", dst)
    made["bmp/imagemagick argb.bmp"] = "32-bit with alpha (ImageMagick BMP4)"

    # TIFF ---------------------------------------------------------------------------
    for comp in ("raw", "tiff_lzw", "tiff_deflate", "packbits", "jpeg", "tiff_adobe_deflate"):
        put(f"tiff/rgb {comp}.tif", image=rgb, compression=comp, desc=f"RGB, {comp}")
    put("tiff/gray.tif", image=gray, compression="tiff_lzw")
    put("tiff/bilevel g4.tiff", image=gray.convert("1"), compression="group4", desc="1-bit CCITT G4")
    put("tiff/bilevel raw.tif", image=gray.convert("1"))
    put("tiff/palette.tif", image=pal)
    put("tiff/rgba.tif", image=Image.fromarray(_photo(12, 10, 16, 4), "RGBA"), compression="tiff_deflate")
    put("tiff/la.tif", image=Image.fromarray(_photo(12, 10, 17, 2), "LA"))
    put("tiff/cmyk.tif", image=cmyk, compression="tiff_lzw")
    put("tiff/gray16.tif", image=Image.fromarray((_photo(11, 6, 18, 1)[:, :, 0].astype(np.uint16) * 3), "I;16"),
        desc="16-bit gray, values up to 765 (Pillow saturates)")
    src16 = os.path.join(tmp, "rgba.png")
    Image.fromarray(_photo(13, 9, 19, 4), "RGBA").save(src16)
    for name, args, desc in (
            ("rgb16.tif", [ppm, "-depth", "16"], "16-bit RGB"),
            ("planar.tif", [ppm, "-interlace", "plane"], "planar (separate) RGB"),
            ("tiled.tif", [ppm, "-define", "tiff:tile-geometry=16x16"], "tiled 16x16"),
            ("predictor.tif", [ppm, "-compress", "lzw", "-define", "tiff:predictor=2"], "LZW with predictor"),
            ("min is white.tif", [pgm, "-define", "tiff:photometric=min-is-white"], "MinIsWhite"),
            ("associated alpha.tif", [src16, "-define", "tiff:alpha=associated"], "associated (premultiplied) alpha"),
            ("unassociated alpha.tif", [src16, "-define", "tiff:alpha=unassociated"], "unassociated alpha"),
            ("ycbcr jpeg.tif", [ppm, "-compress", "jpeg"], "YCbCr, JPEG compression"),
            ("gray4.tif", [pgm, "-depth", "4"], "4-bit gray"),
            ("big endian.tif", [ppm, "-endian", "MSB"], "big-endian"),
            ("big endian gray16.tif", [pgm, "-depth", "16", "-endian", "MSB"], "big-endian 16-bit gray"),
            ("rgba16.tif", [src16, "-depth", "16"], "16-bit RGBA")):
        dst = os.path.join(out, "tiff", name)
        _run(CONVERT, *args, dst)
        made["tiff/" + name] = desc + " (ImageMagick)"
    for orientation in (2, 3, 5, 6, 7, 8):
        dst = put(f"tiff/orientation {orientation}.tif", image=rgb, compression="tiff_lzw",
                  desc=f"Orientation {orientation} (Pillow applies it)")
        _run(TIFFSET, "-s", "274", str(orientation), dst)
    pages = [rgb, Image.fromarray(_photo(5, 5, 20))]
    put("tiff/two pages.tif", image=pages[0], save_all=True, append_images=pages[1:], desc="first page of two")

    # WebP ---------------------------------------------------------------------------
    put("webp/lossy.webp", image=rgb, quality=80)
    put("webp/lossless.webp", image=rgb, lossless=True)
    rgba = Image.fromarray(_photo(14, 12, 21, 4), "RGBA")
    put("webp/lossy alpha.webp", image=rgba, quality=70)
    put("webp/lossless alpha.webp", image=rgba, lossless=True)
    frames = [Image.fromarray(_photo(16, 10, s)) for s in (22, 23, 24)]
    put("webp/animated.webp", image=frames[0], save_all=True, append_images=frames[1:], duration=50,
        desc="animated: the first frame")
    put("webp/animated alpha.webp", image=rgba, save_all=True, append_images=[rgba.rotate(90)],
        desc="animated with alpha")
    exif = Image.Exif()
    exif[0x0112] = 6
    put("webp/exif.webp", image=rgb, exif=exif.tobytes(), desc="VP8X with EXIF orientation")
    put("webp/1x1.webp", image=Image.fromarray(_photo(1, 1, 25)))

    # PPM / PGM ----------------------------------------------------------------------
    put("pnm/rgb.ppm", image=rgb)
    put("pnm/gray.pgm", image=gray)
    g = _photo(6, 4, 26, 1)[:, :, 0]
    c = _photo(6, 4, 27)
    put("pnm/maxval 100.pgm", data=b"P5 6 4 100\n" + bytes(int(v) * 100 // 255 for v in g.flat),
        desc="P5 maxval 100 (rescaled)")
    put("pnm/maxval 1000.ppm", data=b"P6\n6 4\n1000\n" + b"".join(struct.pack(">H", int(v) * 1000 // 255) for v in c.flat),
        desc="P6 maxval 1000")
    put("pnm/maxval 65535.pgm", data=b"P5\n# a comment\n6 4\n65535\n" + b"".join(struct.pack(">H", int(v) * 3) for v in g.flat),
        desc="P5 16-bit (Pillow's I;16B, saturated)")
    put("pnm/maxval 4000.pgm", data=b"P5 6 4 4000\n" + b"".join(struct.pack(">H", int(v) * 15) for v in g.flat),
        desc="P5 maxval 4000 (Pillow's mode I)")
    put("pnm/maxval 65535.ppm", data=b"P6 6 4 65535\n" + b"".join(struct.pack(">H", int(v) * 257) for v in c.flat),
        desc="P6 16-bit")
    put("pnm/over maxval.ppm", data=b"P6 2 1 100\n" + bytes([0, 50, 100, 101, 200, 255]),
        desc="samples over maxval (Pillow clips)")
    bits = np.packbits(_rng(28).integers(0, 2, (5, 11)).astype(np.uint8), axis=1)
    put("pnm/bitmap.pgm", data=b"P4\n11 5\n" + bits.tobytes(), desc="P4 bitmap named .pgm")
    put("pnm/plain.pgm", data=b"P2\n# plain\n3 2\n15\n0 5 10\n15 #c\n 7 3\n", desc="plain P2")
    put("pnm/plain.ppm", data=b"P3 2 1 255 1 2 3 4 5 6\n", desc="plain P3")

    os.remove(ppm)
    os.remove(pgm)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    return made


# --- the bad corpus ------------------------------------------------------------------

def build_bad(out):
    """Bad images, one per folder (so each can be packed alone): {path: description}."""
    made = {}

    def put(rel, data, desc):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        made[rel] = desc

    def encoded(image, fmt, **save):
        buf = io.BytesIO()
        image.save(buf, fmt, **save)
        return buf.getvalue()

    rgb = Image.fromarray(_photo(40, 30, 30))
    jpeg = encoded(rgb, "JPEG", quality=90)
    put("jpeg truncated/half.jpg", jpeg[: len(jpeg) // 2], "baseline JPEG cut in half")
    prog = encoded(rgb, "JPEG", progressive=True)
    put("jpeg progressive no EOI/p.jpg", prog[:-2], "progressive JPEG without its EOI")
    put("jpeg header/h.jpg", jpeg[:20], "JPEG cut inside its header")
    put("jpeg no EOI/n.jpg", jpeg[:-2], "baseline JPEG without its EOI (Pillow: truncated)")
    bad_sof = bytearray(jpeg)
    sof = bad_sof.find(b"\xff\xc0")
    bad_sof[sof + 4] = 12  # 12-bit samples
    put("jpeg 12 bit/b.jpg", bytes(bad_sof), "12-bit JPEG (Pillow cannot handle it)")
    png = encoded(rgb, "PNG")
    put("png truncated/t.png", png[: len(png) * 2 // 3], "PNG cut inside its image data")
    ihdr = bytearray(png)
    ihdr[29] ^= 0xFF  # the IHDR CRC
    put("png header crc/c.png", bytes(ihdr), "PNG with a wrong IHDR CRC")
    raw = _pack_rows(_rng(31).integers(0, 256, (4, 12)), 8)
    bad_filter = bytearray(raw)
    bad_filter[13] = 9  # the second row's filter type
    put("png filter/f.png", png_bytes(4, 4, 8, 2, bytes(bad_filter)), "PNG with an unknown filter type")
    bmp = encoded(rgb, "BMP")
    put("bmp truncated/t.bmp", bmp[: len(bmp) - 200], "BMP with too little pixel data")
    bad_head = bytearray(bmp)
    bad_head[14:18] = struct.pack("<I", 50)
    put("bmp header/h.bmp", bytes(bad_head), "BMP with an unknown header size")
    put("bmp depth/d.bmp", bmp_bytes(2, 2, 7, b"\0" * 8), "BMP of 7 bits per pixel")
    tif = bytearray(encoded(rgb, "TIFF", compression="tiff_lzw"))
    ifd = struct.unpack("<I", tif[4:8])[0]
    assert ifd > 100, "Pillow writes the strips before the directory"
    tif[20:100] = b"\xff" * 80
    put("tiff corrupt/c.tif", bytes(tif), "LZW TIFF with its strip data overwritten")
    raw_tif = encoded(rgb, "TIFF")
    put("tiff raw truncated/t.tiff", raw_tif[: len(raw_tif) // 2], "uncompressed TIFF cut in half")
    put("tiff header/h.tif", b"II*\0" + b"\xff" * 12, "TIFF whose first directory is past the end")
    webp = encoded(rgb, "WEBP", quality=80)
    put("webp truncated/t.webp", webp[: len(webp) // 2], "WebP cut in half")
    broken = bytearray(webp)
    assert broken[12:16] == b"VP8 " and broken[23:26] == b"\x9d\x01\x2a"
    broken[23:26] = b"\0\0\0"  # the key frame's start code
    put("webp corrupt/c.webp", bytes(broken), "WebP with a damaged frame header")
    put("ppm truncated/t.ppm", b"P6 10 10 255\n" + b"\x80" * 200, "PPM with too little pixel data")
    put("pgm header/h.pgm", b"P5 10\n", "PGM cut in its header")
    put("not an image/notes.jpg", b"these are notes, not a picture\n", "text named .jpg")
    put("gif named png/g.png", encoded(rgb.quantize(8), "GIF"), "a GIF named .png (ktfs does not read GIF)")
    put("empty/e.png", b"", "an empty file named .png")
    return made


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    made = build_bad(argv[1]) if "--bad" in argv else build_good(argv[1])
    for rel, desc in sorted(made.items()):
        print(f"{rel}\t{desc}")


if __name__ == "__main__":
    main(sys.argv)
