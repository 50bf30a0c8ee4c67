export async function list () {
  return ['red', 'green']
}
