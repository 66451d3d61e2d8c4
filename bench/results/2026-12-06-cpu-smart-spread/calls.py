import sys
calls=[]
for l in open(sys.argv[1]):
    p=l.split()
    if p[0]!=sys.argv[2]: continue
    if p[1]=='call': calls.append([p[2:],[],[]])
    elif p[1]=='plan': calls[-1][2].append((p[2],p[3],p[5]))
    elif p[1]=='step': calls[-1][1].append([float(x) for x in p[2:]])
import statistics as st
T=0
for i,(h,s,pl) in enumerate(calls):
    w=[x for x in s if x[5]>1]; pln=[x for x in s if x[5]<=1]
    T+=sum(x[0] for x in s)
    print(i,h,'steps',len(s),'plain med %.1f'%st.median([x[0] for x in pln]) if pln else '', 'trees',len(w),'%.0f ms'%sum(x[0] for x in w),'tok %.1f'%sum(x[4] for x in w), 'plans', ' '.join(''.join(t) for t in pl if t!=('0','0','0')))
print('total step ms %.0f'%T)
