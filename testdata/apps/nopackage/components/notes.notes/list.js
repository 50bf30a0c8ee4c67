export async function list () {
  return []
}
