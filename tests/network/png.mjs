// Pixels of Chromium's screenshots, for the page tests (world.test.mjs, account.test.mjs): a PNG
// decoder for what Chromium writes (8-bit RGB or RGBA, not interlaced) and pixel counts.
import assert from "node:assert/strict";
import zlib from "node:zlib";

// The RGB pixels of a PNG (8-bit RGB or RGBA, not interlaced: what Chromium's screenshots are).
export function decodePng(buf) {
  let at = 8;
  let width = 0, height = 0, channels = 0;
  const idat = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString("latin1", at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      assert.equal(data[8], 8, "bit depth");
      channels = { 2: 3, 6: 4 }[data[9]];
      assert.ok(channels, `colour type ${data[9]}`);
      assert.equal(data[12], 0, "interlaced");
    } else if (type === "IDAT") {
      idat.push(data);
    }
    at += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(width * height * 3);
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < height; ++y) {
    const filter = raw[y * (stride + 1)];
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride; ++i) {
      const a = i >= channels ? line[i - channels] : 0;
      const b = prev[i];
      const c = i >= channels ? prev[i - channels] : 0;
      let v = 0;
      if (filter === 1) v = a;
      else if (filter === 2) v = b;
      else if (filter === 3) v = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        v = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      line[i] = (line[i] + v) & 255;
    }
    for (let x = 0; x < width; ++x) line.copy(out, (y * width + x) * 3, x * channels, x * channels + 3);
    prev = line;
  }
  return { width, height, rgb: out };
}

export function countPixels(png, pred) {
  let n = 0;
  for (let i = 0; i < png.rgb.length; i += 3) n += pred(png.rgb[i], png.rgb[i + 1], png.rgb[i + 2]);
  return n;
}
export const near = (r, g, b, hex) => {
  const h = parseInt(hex.slice(1), 16);
  return Math.abs(r - (h >> 16)) + Math.abs(g - ((h >> 8) & 255)) + Math.abs(b - (h & 255)) < 24;
};
