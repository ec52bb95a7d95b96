#!/usr/bin/env python3
# Lane-level numpy model of decode kernel 2 (kernels/attn_decode_warp.cu, adw_partial_kernel) and the
# combine pass: the same lane layouts (scoring lanes r + RP*qd, P V lanes cc + CH*ph), swizzled
# shared tiles, xor / indexed shuffles, per-tile online softmax and masked (invalid-slot, past-the-
# range) rows, in float32, against float64 softmax attention. Written while no GPU was lent, to
# check the kernel's index and softmax logic before its first device run (it does not check
# cp.async / __syncwarp ordering). Run: python3 scripts/gpu/attn_decode_warp_model.py (numpy);
# exits non-zero when a case is off by more than 1e-5.
import sys

import numpy as np

SP = 16  # ADW_SP: positions per tile

def kernel_warp(HD,G,Kr,Vr,valid,q,scale,p_begin,p_end):
    # Kr,Vr: [ctx, HD] float32 (bf16-exact values); valid: [ctx] bool; q: [G, HD]
    CH=HD//8; DS=max(G*HD//128,2); RP=32//DS; NP=SP//RP; CPL=CH//DS; PHN=32//CH; FS=1 if RP>=8 else 8//RP
    sw=lambda r,c: c ^ ((r*FS)&7)
    lanes=np.arange(32); r=lanes%RP; qd=lanes//RP; cc=lanes%CH; ph=lanes//CH
    f32=np.float32
    qr=np.zeros((32,G,CPL,8),f32)
    for l in range(32):
        for gi in range(G):
            for j in range(CPL):
                c=qd[l]+DS*j; qr[l,gi,j]=q[gi,c*8:c*8+8]
    acc=np.zeros((32,G,8),f32); m=np.full((32,G),-np.inf,f32); lsum=np.zeros((32,G),f32)
    n_tiles=(p_end-p_begin+SP-1)//SP if p_end>p_begin else 0
    for i in range(n_tiles):
        # the tile in shared memory (swizzled), zero-filled rows, mask
        tk=np.zeros((SP*CH,8),f32); tv=np.zeros((SP*CH,8),f32); okm=0
        for row in range(SP):
            p=p_begin+i*SP+row
            ok = p<p_end and valid[p]
            if ok: okm|=1<<row
            for c in range(CH):
                if ok:
                    tk[row*CH+sw(row,c)]=Kr[p,c*8:c*8+8]; tv[row*CH+sw(row,c)]=Vr[p,c*8:c*8+8]
        sc=np.zeros((32,G,NP),f32)
        for pp in range(NP):
            d=np.zeros((32,G),f32)
            for l in range(32):
                row=r[l]+RP*pp
                for j in range(CPL):
                    kf=tk[row*CH+sw(row,qd[l]+DS*j)]
                    for gi in range(G):
                        for x in range(8): d[l,gi]=f32(qr[l,gi,j,x]*kf[x]+d[l,gi])
            o=RP
            while o<32: d=(d+d[lanes^o]).astype(f32); o<<=1
            for l in range(32):
                row=r[l]+RP*pp
                sc[l,:,pp]= d[l]*f32(scale) if (okm>>row)&1 else -np.inf
        e=np.zeros((32,G,NP),f32); corr=np.zeros((32,G),f32)
        for gi in range(G):
            tm=sc[:,gi,0].copy()
            for pp in range(1,NP): tm=np.maximum(tm,sc[:,gi,pp])
            o=1
            while o<RP: tm=np.maximum(tm,tm[lanes^o]); o<<=1
            mn=np.maximum(m[:,gi],tm); mref=np.where(mn==-np.inf,f32(0),mn)
            with np.errstate(invalid='ignore'):
                corr[:,gi]=np.exp(m[:,gi]-mref)
            m[:,gi]=mn
            es=np.zeros(32,f32)
            for pp in range(NP):
                e[:,gi,pp]=np.exp(sc[:,gi,pp]-mref); es=es+e[:,gi,pp]
            lsum[:,gi]=lsum[:,gi]*corr[:,gi]+es
        acc=acc*corr[:,:,None]
        for k in range(SP//PHN):
            for l in range(32):
                row=ph[l]+PHN*k; vf=tv[row*CH+sw(row,cc[l])]
                src=ph[l]+(PHN*k)%RP; pas=(PHN*k)//RP
                for gi in range(G):
                    w=e[src,gi,pas]; acc[l,gi]=(w*vf+acc[l,gi]).astype(f32)
    o=CH
    while o<32: acc=acc+acc[lanes^o]; o<<=1
    L=lsum.copy(); o=1
    while o<RP: L=L+L[lanes^o]; o<<=1
    out=np.zeros((G,HD+2),f32)
    for l in range(32):
        if ph[l]==0: out[:,cc[l]*8:cc[l]*8+8]=acc[l]
    out[:,HD]=m[0]; out[:,HD+1]=L[0]
    return out

def check_banks(HD, G):
    """The three shared-memory access patterns hit 8 distinct 16-byte bank groups per quarter warp."""
    CH=HD//8; DS=max(G*HD//128,2); RP=32//DS; NP=SP//RP; CPL=CH//DS; PHN=32//CH; FS=1 if RP>=8 else 8//RP
    sw=lambda r,c: c ^ ((r*FS)&7)
    pats=[[(r+RP*pp, (l//RP)+DS*j) for l in range(32) for r in [l%RP]] for pp in range(NP) for j in range(CPL)]
    pats+=[[(l//CH+PHN*k, l%CH) for l in range(32)] for k in range(SP//PHN)]
    pats+=[[((l+32*k)//CH, (l+32*k)%CH) for l in range(32)] for k in range(SP*CH//32)]
    return all(len({sw(row,c)%8 for row,c in pat[q*8:q*8+8]})==8 for pat in pats for q in range(4))

def n_eff(ctx,n_split,L): n=(ctx+L-1)//L; return max(1,min(n,n_split))
def run(HD,G,ctx,n_split,L=32,seed=0,bad=()):
    rng=np.random.default_rng(seed)
    bf=lambda a: (a.astype(np.float32).view(np.uint32)&0xffff0000).view(np.float32)
    K=bf(rng.uniform(-1,1,(ctx,HD))); V=bf(rng.uniform(-1,1,(ctx,HD))); q=rng.uniform(-1,1,(G,HD)).astype(np.float32)
    valid=np.ones(ctx,bool)
    for b in bad: valid[b]=False
    scale=1/np.sqrt(HD); ne=n_eff(ctx,n_split,L); ln=(ctx+ne-1)//ne
    parts=[kernel_warp(HD,G,K,V,valid,q,scale,sp*ln,min(ctx,sp*ln+ln)) for sp in range(ne)]
    Mh=np.max([p[:,HD] for p in parts],axis=0)
    num=sum(p[:,:HD]*np.exp(p[:,HD]-Mh)[:,None] for p in parts); den=sum(p[:,HD+1]*np.exp(p[:,HD]-Mh) for p in parts)
    o=num/den[:,None]
    s=(q.astype(np.float64)@K[valid].T.astype(np.float64))*scale; w=np.exp(s-s.max(1,keepdims=True)); w/=w.sum(1,keepdims=True)
    ref=w@V[valid].astype(np.float64)
    return np.linalg.norm(o-ref)/np.linalg.norm(ref)
for HD in (64,128):
    for G in (1,2,4,8):
        if not check_banks(HD,G):
            print("head_dim %d group %d: shared-memory bank conflict  FAIL" % (HD,G))
            sys.exit(1)
        for ctx,ns in ((1,9),(17,9),(50,3),(600,9),(333,128),(97,4)):
            e=run(HD,G,ctx,ns,bad=(5,) if ctx>20 else ())
            print("head_dim %3d group %d ctx %4d splits %3d: err %.2e%s" % (HD,G,ctx,ns,e,"  FAIL" if e>1e-5 else ""))
            if e>1e-5: sys.exit(1)
