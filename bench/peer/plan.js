// Reads `toa-push --plan -o json` on stdin and prints one line per image for buildah-push.sh:
// name reference dependencies base label=id[,label=id...]
let input = ''
process.stdin.on('data', (d) => { input += d })
process.stdin.on('end', () => {
  for (const img of JSON.parse(input).images) {
    const components = img.components.map((c) => `${c.label}=${c.id}`).join(',')
    console.log([img.name, img.reference, img.dependencies, img.base.reference, components].join(' '))
  }
})
