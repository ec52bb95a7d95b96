#!/usr/bin/env python3
# Lane-level numpy model of one chunk of the pipelined decode product (kernels/gemv_pipe_impl.cuh):
# the x fill into B fragments (P4 / P8 column layouts, hi / mid / lo parts or one part, Σx per sub-block), the
# Q4_K / Q5_K / Q6_K decoders reading the staged shared-memory slot (Q6_K at every 2-byte offset of
# its 16-byte aligned cover, words through the funnel shift), mma m16n8k16 by its PTX fragment
# layout, the per-chunk scale / min accumulation and the block's per-lane reduction, against the
# dequantized rows' dot product (float64). Written while no GPU was lent, to check the kernel's
# index algebra before its first device run (not cp.async ordering, barriers or the cluster sum).
# Run: python3 scripts/gpu/gemv_pipe_model.py (numpy); exits non-zero on a mismatch.
import sys

import numpy as np
rng = np.random.default_rng(1)


def mma(A, B):  # A[lane] = 4 regs of 2 vals, B[lane] = 2 regs of 2 vals -> C[lane] 4 vals
    Am = np.zeros((16,16)); Bm = np.zeros((16,8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = A[lane]; b = B[lane]
        Am[g, 2*t:2*t+2] = a[0]; Am[g+8, 2*t:2*t+2] = a[1]; Am[g, 2*t+8:2*t+10] = a[2]; Am[g+8, 2*t+8:2*t+10] = a[3]
        Bm[2*t:2*t+2, g] = b[0]; Bm[2*t+8:2*t+10, g] = b[1]
    Cm = Am @ Bm
    C = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        C.append([Cm[g, 2*t], Cm[g, 2*t+1], Cm[g+8, 2*t], Cm[g+8, 2*t+1]])
    return C

def f16(b, o): return float(np.frombuffer(bytes(b[o:o+2]), dtype=np.float16)[0])

def q4k_ref(blk):
    d, dmin = f16(blk, 0), f16(blk, 2); s = blk[4:16]; qs = blk[16:144]
    out = np.zeros(256)
    for e in range(256):
        j, w = e // 64, e % 64; nib, l = w // 32, w % 32; sub = e // 32
        if sub < 4: sc, m = s[sub] & 63, s[sub+4] & 63
        else: sc = (s[sub+4] & 0xF) | ((s[sub-4] >> 6) << 4); m = (s[sub+4] >> 4) | ((s[sub] >> 6) << 4)
        q = (qs[32*j + l] >> (4*nib)) & 15
        out[e] = d*sc*q - dmin*m
    return out

def q5k_ref(blk):
    d, dmin = f16(blk, 0), f16(blk, 2); s = blk[4:16]; qh = blk[16:48]; qs = blk[48:176]
    out = np.zeros(256)
    for e in range(256):
        j, w = e // 64, e % 64; nib, l = w // 32, w % 32; sub = e // 32
        if sub < 4: sc, m = s[sub] & 63, s[sub+4] & 63
        else: sc = (s[sub+4] & 0xF) | ((s[sub-4] >> 6) << 4); m = (s[sub+4] >> 4) | ((s[sub] >> 6) << 4)
        q = ((qs[32*j + l] >> (4*nib)) & 15) | (((qh[l] >> (2*j + nib)) & 1) << 4)
        out[e] = d*sc*q - dmin*m
    return out

def q6k_ref(blk):
    ql, qh, sc = blk[0:128], blk[128:192], np.array(blk[192:208], dtype=np.uint8).view(np.int8); d = f16(blk, 208)
    out = np.zeros(256)
    for e in range(256):
        h, r = e // 128, e % 128; k, l = r // 32, r % 32
        q = ((ql[64*h + 32*(k&1) + l] >> (4*(k>>1))) & 15) | (((qh[32*h + l] >> (2*k)) & 3) << 4)
        out[e] = d * sc[8*h + 2*k + l//16] * (q - 32)
    return out

def word(row, byteoff):  # little-endian u32 from a byte array
    return int.from_bytes(bytes(row[byteoff:byteoff+4]), 'little')

class Slot:  # a Q6_K block staged at byte `off` (even) of its 240-byte slot, read as the kernel does
    def __init__(self, blk, off):
        self.b = bytearray(rng.integers(0, 256, 240, dtype=np.uint8).tobytes()); self.b[off:off+210] = blk
        self.off = off
    def w32(self, idx):  # __funnelshift_r(rw[idx], rw[idx + 1], 8 (off & 2)), rw = slot + (off & 12)
        base = self.off & 12
        lo, hi = word(self.b, base + 4*idx), word(self.b, base + 4*idx + 4)
        return ((hi << 32 | lo) >> ((self.off & 2) * 8)) & 0xffffffff
    def u16(self, o): return f16(self.b, self.off + o)
def byte(v, i): return (v >> (8*i)) & 0xff

def run(typ, NR, n, XP=3):  # XP: x parts (1 only with NR 8, as the kernel's static_assert)
    P8 = NR == 8; NT = XP if P8 else NR // 2
    BB = {'q4k': 144, 'q5k': 176, 'q6k': 210}[typ]; QS = 48 if typ == 'q5k' else 16
    rows = []
    for r in range(16):
        blk = bytearray(rng.integers(0, 256, BB, dtype=np.uint8).tobytes())
        if typ != 'q6k':
            blk[0:2] = np.float16(rng.uniform(0.01, 0.1)).tobytes(); blk[2:4] = np.float16(rng.uniform(0.01, 0.1)).tobytes()
        else:
            blk[208:210] = np.float16(rng.uniform(0.01, 0.1)).tobytes()
        rows.append(blk)
    x = np.zeros((NR, 256)); x[:n] = rng.uniform(-1, 1, (n, 256))
    parts = [x*0.5, x*0.25, x*0.25] if XP == 3 else [x]  # hi, mid, lo stand-ins (sum = x)
    # fill: bsm[pair][t][lane] = [(b0 of s=2p), (b1 of 2p), (b0 of 2p+1), (b1 of 2p+1)] each a pair
    bsm = [[[[(0.0,0.0)]*4 for _ in range(32)] for _ in range(NT)] for _ in range(8)]
    sxs = np.zeros((8, NR))
    for r in range(n):
        for q in range(64):
            s, tg = q >> 2, q & 3
            for p in range(XP):
                tt = p if P8 else r >> 1
                ln = 4*r + tg if P8 else 16*(r & 1) + 4*p + tg
                v = parts[p][r, 4*q:4*q+4]
                bsm[s >> 1][tt][ln][2*(s & 1)] = (v[0], v[1]); bsm[s >> 1][tt][ln][2*(s & 1)+1] = (v[2], v[3])
            if (q & 7) == 0: sxs[q >> 3, r] = x[r, 4*q:4*q+32].sum()
    XR = 2 if P8 else NT
    acc = np.zeros((32, 2, XR))
    # per lane state, emulate warp-synchronously per sub-block
    def addc(t1, c, sc0, sc1):  # c[lane][t][4]
        for lane in range(32):
            if P8:
                for j in range(2):
                    t1[lane][0][j] += sc0[lane] * sum(c[lane][t][j] for t in range(NT))
                    t1[lane][1][j] += sc1[lane] * sum(c[lane][t][2+j] for t in range(NT))
            else:
                for t in range(NT):
                    t1[lane][0][t] += sc0[lane] * (c[lane][t][0] + c[lane][t][1])
                    t1[lane][1][t] += sc1[lane] * (c[lane][t][2] + c[lane][t][3])
    t1 = np.zeros((32, 2, XR)); t2 = np.zeros((32, 2, XR))
    if typ != 'q6k':
        hdr = {}
        for lane in range(32):
            g = lane >> 2
            for rr in range(2):
                h = rows[g + 8*rr][0:16]
                hy, hz, hw = word(h, 4), word(h, 8), word(h, 12)
                scw = [hy & 0x3f3f3f3f, (hw & 0x0f0f0f0f) | ((hy >> 2) & 0x30303030)]
                mw = [hz & 0x3f3f3f3f, ((hw >> 4) & 0x0f0f0f0f) | ((hz >> 2) & 0x30303030)]
                hdr[lane, rr] = (scw, mw, f16(h, 0), f16(h, 2))
        for j in range(4):
            for nib in range(2):
                sb = 2*j + nib
                c = [[[0.0]*4 for _ in range(NT)] for _ in range(32)]
                for hh in range(2):
                    A, Bt = [], [[] for _ in range(NT)]
                    for lane in range(32):
                        g, tig = lane >> 2, lane & 3
                        qa = (word(rows[g], QS + 4*(8*j + 4*hh + tig)) >> (4*nib)) & 0x0f0f0f0f
                        qb = (word(rows[g+8], QS + 4*(8*j + 4*hh + tig)) >> (4*nib)) & 0x0f0f0f0f
                        if typ == 'q5k':
                            qa |= ((word(rows[g], 16 + 4*(4*hh + tig)) >> (2*j + nib)) & 0x01010101) << 4
                            qb |= ((word(rows[g+8], 16 + 4*(4*hh + tig)) >> (2*j + nib)) & 0x01010101) << 4
                        A.append([(byte(qa,0), byte(qa,1)), (byte(qb,0), byte(qb,1)), (byte(qa,2), byte(qa,3)), (byte(qb,2), byte(qb,3))])
                        for t in range(NT):
                            b = bsm[sb][t][lane]
                            Bt[t].append([b[2*hh], b[2*hh+1]])
                    for t in range(NT):
                        C = mma(A, Bt[t])
                        for lane in range(32):
                            for k in range(4): c[lane][t][k] += C[lane][k]
                sc0 = [byte(hdr[l,0][0][sb >> 2], sb & 3) for l in range(32)]
                sc1 = [byte(hdr[l,1][0][sb >> 2], sb & 3) for l in range(32)]
                addc(t1, c, sc0, sc1)
                for lane in range(32):
                    tig = lane & 3
                    sx = [sxs[sb, 2*tig], sxs[sb, 2*tig+1]] if P8 else [0.0 if tig & 1 else sxs[sb, 2*t + (tig >> 1)] for t in range(NT)]
                    m0 = byte(hdr[lane,0][1][sb >> 2], sb & 3); m1 = byte(hdr[lane,1][1][sb >> 2], sb & 3)
                    for xx in range(XR):
                        t2[lane][0][xx] += m0 * sx[xx]; t2[lane][1][xx] += m1 * sx[xx]
        for lane in range(32):
            for rr in range(2):
                _, _, d, dm = hdr[lane, rr]
                acc[lane][rr] = d * t1[lane][rr] - dm * t2[lane][rr]
        ref = np.array([(q4k_ref if typ == 'q4k' else q5k_ref)(rows[r]) for r in range(16)])
    else:
        slots = [Slot(rows[r], int(rng.integers(0, 8)) * 2) for r in range(16)]
        st = {}
        for lane in range(32):
            g = lane >> 2
            for rr in range(2):
                sl = slots[g + 8*rr]
                scw = [sl.w32(48 + q) ^ 0x80808080 for q in range(4)]
                st[lane, rr] = (scw, sl.u16(208))
        for hh in range(2):
            for k in range(4):
                pr = 4*hh + k
                for lh in range(2):
                    s = 2*pr + lh
                    A = []
                    Bt = [[] for _ in range(NT)]
                    for lane in range(32):
                        g, tig = lane >> 2, lane & 3
                        q2 = []
                        for rr in range(2):
                            sl = slots[g + 8*rr]
                            a = sl.w32(16*hh + 8*(k & 1) + 4*lh + tig); v = sl.w32(32 + 8*hh + 4*lh + tig)
                            lo = ((a >> 4) & 0x0f0f0f0f) if (k & 2) else (a & 0x0f0f0f0f)
                            hi = ((v << (4 - 2*k)) if k < 2 else (v >> (2*k - 4))) & 0x30303030
                            q2.append(lo | hi)
                        A.append([(byte(q2[0],0)-32, byte(q2[0],1)-32), (byte(q2[1],0)-32, byte(q2[1],1)-32), (byte(q2[0],2)-32, byte(q2[0],3)-32), (byte(q2[1],2)-32, byte(q2[1],3)-32)])
                        for t in range(NT):
                            b = bsm[pr][t][lane]
                            Bt[t].append([b[2*lh], b[2*lh+1]])
                    c = [[[0.0]*4 for _ in range(NT)] for _ in range(32)]
                    for t in range(NT):
                        C = mma(A, Bt[t])
                        for lane in range(32): c[lane][t] = C[lane]
                    sbv = lambda w, i: (byte(w, i)) - 128
                    sc0 = [sbv(st[l,0][0][s >> 2], s & 3) for l in range(32)]
                    sc1 = [sbv(st[l,1][0][s >> 2], s & 3) for l in range(32)]
                    addc(t1, c, sc0, sc1)
        for lane in range(32):
            for rr in range(2): acc[lane][rr] = st[lane, rr][1] * t1[lane][rr]
        ref = np.array([q6k_ref(rows[r]) for r in range(16)])
    # reduction as in the kernel: red[row][xr]
    red = np.full((16, NR), np.nan)
    for lane in range(32):
        g, tig = lane >> 2, lane & 3
        for rr in range(2):
            lr = g + 8*rr
            if P8:
                red[lr, 2*tig] = acc[lane][rr][0]; red[lr, 2*tig+1] = acc[lane][rr][1]
            else:
                for t in range(NT):
                    o = acc[min(lane+1, 31)][rr][t]
                    if (tig & 1) == 0: red[lr, 2*t + (tig >> 1)] = acc[lane][rr][t] + o
    want = ref @ x.T  # [16, NR]
    err = np.abs(red[:, :n] - want[:, :n]).max() / (np.abs(want[:, :n]).max() + 1e-30)
    return err

ok = True
for typ in ('q4k', 'q5k', 'q6k'):
    for NR, XP, ns in ((2, 3, (1, 2)), (4, 3, (3, 4)), (8, 3, (5, 8)), (8, 1, (1, 3, 8))):
        for n in ns:
            e = run(typ, NR, n, XP)
            print(typ, 'NR', NR, 'parts', XP, 'n', n, 'rel err %.2e' % e)
            ok &= e < 1e-9
print('OK' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
